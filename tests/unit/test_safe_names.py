"""File names made from data (`pipeline.core.safe_names`): hostile ids give distinct, confined, portable
names; the module's worked examples hold."""

from __future__ import annotations

import doctest
import re
from pathlib import Path

import pytest
from memtrace_loop.pipeline.core import safe_names
from memtrace_loop.pipeline.core.run_folder import RunFolder
from memtrace_loop.pipeline.core.safe_names import HASH_SEP, MAX_KEPT, confined, file_stem

HOSTILE = (
    "..", ".", "../../../x", "..\\..\\x", "/tmp/x", "/etc/passwd", "C:\\Windows\\x", "a/b", "a\\b", "a_b", "a b",
    "CON", "con", "Con", "nul.txt", "NUL", "com1", "LPT9.json", "aux.", "conin$",
    "x" * 300, "x" * 301, "y" * MAX_KEPT, "y" * (MAX_KEPT + 1),
    "Conv-1", "conv-1", "CONV-1", "conv-1.", "conv-1 ", " conv-1", ".conv-1", "-conv-1",
    "", " ", "///", "...", "\x00", "\n", "会話", "会話2", "%2e%2e%2f", "x~0274b71897", "tiny-1",
)
PLAIN = ("conv-26", "tiny-1", "sim-2-0", "e47becba", "a.b_c-d", "y" * MAX_KEPT)
_PORTABLE = re.compile(r"[a-z0-9._~-]+")
_DEVICES = {"con", "prn", "aux", "nul", "conin$", "conout$"} | {f"{p}{i}" for p in ("com", "lpt") for i in range(10)}


def test_the_worked_examples_of_the_module_doc_hold():
    failures, tried = doctest.testmod(safe_names)
    assert tried >= 8 and failures == 0


@pytest.mark.parametrize("identifier", PLAIN)
def test_an_id_that_is_already_a_safe_name_is_kept(identifier):
    assert file_stem(identifier) == identifier


@pytest.mark.parametrize("identifier", HOSTILE)
def test_every_name_is_one_portable_component_confined_to_its_folder(identifier, tmp_path):
    name = file_stem(identifier)
    assert _PORTABLE.fullmatch(name), name  # no separator, no drive, nothing a file system reads specially
    assert not name.startswith(".") and not name.endswith(".") and len(name) <= MAX_KEPT + 12
    assert name.split(".")[0].lower() not in _DEVICES
    path = confined(tmp_path, f"{name}.json")
    assert path.parent == tmp_path and path.resolve().is_relative_to(tmp_path.resolve())
    path.write_text(identifier, encoding="utf-8")  # it can be written, where it was meant to be
    assert (tmp_path / path.name).read_text(encoding="utf-8") == identifier
    if name != identifier:
        assert HASH_SEP in name  # a changed id carries its hash, so it cannot land on a kept one


def test_distinct_ids_give_distinct_names_even_on_a_case_insensitive_file_system():
    ids = set(HOSTILE) | set(PLAIN)
    names = [file_stem(i).casefold() for i in ids]
    assert len(set(names)) == len(ids)


def test_a_kept_id_that_looks_like_a_changed_ones_name_cannot_take_it():
    changed = file_stem("../../../x")
    assert file_stem(changed) != changed  # its `~` is not a kept character
    assert file_stem(changed) != file_stem("../../../x")


@pytest.mark.parametrize("name", ["../x", "a/../../x", "/tmp/x", "", ".", "graphs/../../x"])
def test_confined_refuses_what_leaves_its_root(name, tmp_path):
    with pytest.raises(ValueError, match="is not a name inside"):
        confined(tmp_path / "run", name)


def test_confined_refuses_a_symlink_that_leads_out(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "out").symlink_to(tmp_path)
    with pytest.raises(ValueError, match="is not a name inside"):
        confined(tmp_path / "run", "out/x.json")
    assert confined(tmp_path / "run", "graphs/x.json") == tmp_path / "run" / "graphs" / "x.json"


def test_a_run_folders_graph_file_is_the_safe_stem():
    assert RunFolder.graph_file("conv-26") == "conv-26.json"
    assert RunFolder.graph_file("../../../x") == f"{file_stem('../../../x')}.json"


def test_the_mem0ai_store_folder_of_a_hostile_conversation_stays_under_mem0_dir(tmp_path, monkeypatch):
    from memtrace_loop.memory_systems.mem0ai.memory import new_folder

    monkeypatch.setenv("MEM0_DIR", str(tmp_path / "mem0"))
    root = (tmp_path / "mem0" / "memtrace-mem0ai").resolve()
    folders = {new_folder(identifier) for identifier in ("../../../x", "/tmp/x", "a/b", "CON", "x" * 300)}
    assert len(folders) == 5
    assert all(Path(f).resolve().parent == root for f in folders)
