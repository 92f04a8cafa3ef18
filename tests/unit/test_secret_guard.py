"""The entry points' secret keeping: the redacting tracker, Hydra's output files scrubbed, the override
guard of the apps' `main`, and optimize's saved config (redacted on disk, real again on resume)."""

from __future__ import annotations

import io
import json
import logging
import sys

import pytest
from memtrace_loop.experiments import optimize
from memtrace_loop.experiments.secret_guard import guarded, known_secrets, protect, scrub_hydra_output
from memtrace_loop.pipeline.core.records import PromptSet
from memtrace_loop.pipeline.core.redaction import RedactingStream, SecretFilter
from memtrace_loop.pipeline.tracking.redacting_tracker import RedactingTracker

from tests.support.tracking import InMemoryTracker

KEY = "sk-memtrace-LEAKCANARY-guard-4242abcd"
URL = f"http://user:{KEY}@proxy:8080/v1"


def test_redacting_tracker_masks_everything_it_writes(tmp_path):
    inner = InMemoryTracker()
    tracker = RedactingTracker(inner, [KEY])
    (tmp_path / "dir" / "sub").mkdir(parents=True)
    (tmp_path / "dir" / "sub" / "config.json").write_text(json.dumps({"api_base": URL}))
    (tmp_path / "dir" / "clean.txt").write_text("nothing here")
    (tmp_path / "error.txt").write_text(f"Incorrect API key provided: {KEY}")
    (tmp_path / "plot.png").write_bytes(b"\x89PNG not text")
    with tracker.start_run(f"run {KEY}") as run_id:
        tracker.set_tags({"memtrace.dataset": URL})
        tracker.log_params({"lm.task.api_base": URL, "workers": 2})
        tracker.log_metrics({"n": 1.0})
        tracker.log_text(f"error {KEY}", "errors.txt")
        tracker.log_table({"error": [f"401 {KEY}", "ok"]}, "table.json")
        tracker.log_artifact(tmp_path / "error.txt", "logs")
        tracker.log_artifact(tmp_path / "plot.png")
        tracker.log_artifacts(tmp_path / "dir", "saved")
        tracker.register_prompts("mem0", PromptSet({"extract": f"use {KEY}"}), f"iteration 1: {KEY}", {"k": KEY})
    run = inner.runs[run_id]
    stored = json.dumps([run.name, run.tags, run.params, [repr(v) for v in run.artifacts.values()],
                         [(s, dict(p.instruction_by_stage), m, t) for s, p, m, t in run.registered]])
    assert KEY not in stored and "LEAKCANARY" not in stored
    assert run.params == {"lm.task.api_base": "http://user:***@proxy:8080/v1", "workers": "2"}
    assert run.text("saved/sub/config.json") == '{"api_base": "http://user:***@proxy:8080/v1"}'
    assert run.text("saved/clean.txt") == "nothing here" and run.text("logs/error.txt").endswith("provided: ***")
    assert KEY in (tmp_path / "error.txt").read_text(), "the original file is left as it is"
    assert tracker.get_run(run_id).metrics == {"n": 1.0}  # reading passes through


def test_scrub_hydra_output_rewrites_only_what_holds_a_secret(tmp_path):
    hydra_dir = tmp_path / ".hydra"
    hydra_dir.mkdir()
    (hydra_dir / "overrides.yaml").write_text(f"- lm.task.api_base={URL}\n- workers=2\n")
    (hydra_dir / "config.yaml").write_text(f"lm:\n  task:\n    api_base: {URL}\n")
    (hydra_dir / "hydra.yaml").write_text("hydra:\n  run:\n    dir: out\n")
    changed = scrub_hydra_output(tmp_path, [KEY])
    assert [p.name for p in changed] == ["config.yaml", "overrides.yaml"]
    overrides = (hydra_dir / "overrides.yaml").read_text()
    assert overrides == "- lm.task.api_base=http://user:***@proxy:8080/v1\n- workers=2\n"
    assert all(KEY not in p.read_text() for p in hydra_dir.iterdir())
    assert scrub_hydra_output(tmp_path / "missing", [KEY]) == []


def test_guarded_main_refuses_a_secret_override_before_the_app_runs(monkeypatch, capsys):
    calls = []
    main = guarded(lambda *args: calls.append(args))
    monkeypatch.setattr(sys, "argv", ["memtrace run", "lm=openai", f"+lm.task.api_key={KEY}"])
    with pytest.raises(SystemExit) as stopped:
        main()
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and calls == []
    assert err.count("\n") == 1 and "'lm.task.api_key'" in err and "api_key_env" in err and KEY not in err
    main({"a": 1})  # called with a config (a library use): argv is not Hydra's, nothing is checked
    assert calls == [({"a": 1},)]


def test_guarded_main_protects_the_console_and_protect_adds_the_config_secrets(monkeypatch):
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setenv("MEMTRACE_GUARD_KEY", "env-key-value-1234")
    handler = logging.StreamHandler(io.StringIO())
    logging.getLogger().addHandler(handler)
    try:
        guarded(lambda: print(f"config: {URL}"))()
        assert isinstance(sys.stdout, RedactingStream) and isinstance(sys.stderr, RedactingStream)
        secrets = protect({"lm": {"api_key_env": "MEMTRACE_GUARD_KEY", "api_base": URL}})
        print("key env-key-value-1234")
        found = known_secrets()
        logging.getLogger("memtrace.test").warning("sent %s", "env-key-value-1234")
    finally:
        logging.getLogger().removeHandler(handler)
    assert set(secrets) == {KEY, "env-key-value-1234"} and set(found) >= set(secrets)
    assert out.getvalue() == "config: http://user:***@proxy:8080/v1\nkey ***\n"
    assert any(isinstance(f, SecretFilter) for f in handler.filters)
    assert handler.stream.getvalue() == "sent ***\n"


def test_optimize_saves_its_config_redacted_and_resumes_with_the_real_values(tmp_path):
    plain = {"lm": {"task": {"api_base": URL, "model": "m"}}, "workers": 2, "resume": None}
    run_dir, used = optimize._run_dir(plain, tmp_path)
    assert used == plain
    saved = (run_dir / optimize.SAVED_CONFIG).read_text()
    assert KEY not in saved and "http://user:***@proxy:8080/v1" in saved
    (run_dir / optimize.CHECKPOINT).write_text("{}")
    again = {**plain, "resume": str(run_dir), "workers": 4}
    _, resumed = optimize._run_dir(again, tmp_path)
    assert resumed["resume"] == str(run_dir) and resumed["lm"]["task"]["api_base"] == URL and resumed["workers"] == 4
    assert optimize.config_digest(resumed) == optimize.config_digest(plain)
