"""Tests for pipeline.core.files.write_atomically: whole content or the old file, never a leftover."""

from __future__ import annotations

import pytest
from memtrace_loop.pipeline.core.files import write_atomically


def test_writes_text_and_bytes_and_creates_the_folder(tmp_path) -> None:
    path = write_atomically(tmp_path / "a" / "b.json", "caf\u00e9")
    assert path.read_bytes() == "caf\u00e9".encode()
    write_atomically(path, b"\x00\x01")
    assert path.read_bytes() == b"\x00\x01"
    assert sorted(p.name for p in path.parent.iterdir()) == ["b.json"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch) -> None:
    path = write_atomically(tmp_path / "record.json", "old")

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr("memtrace_loop.pipeline.core.files.os.replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        write_atomically(path, "new")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["record.json"]
