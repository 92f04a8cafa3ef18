"""The did-you-mean of `override_errors`, in-process over the registries: for every app's config, every
config group's options and every top-level key, a misspelling is answered with the right suggestion in
one line that never shows the override's value; valid overrides (sweeps, appended new keys) pass. The
console script's side (exit 2, nothing written): tests/apps/test_override_typos_app.py."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_module
from memtrace_loop.experiments.override_errors import CONFIG_MODULE, override_error

APPS = ["run", "optimize", "attribute", "report", "export", "stages", "upload", "compare"]
VALUE = "7131"


def _groups_and_keys(app: str) -> tuple[dict[str, list[str]], list[str]]:
    from hydra.core.global_hydra import GlobalHydra

    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        cfg = compose(app)
        groups = {g: loader.get_group_options(g) for g in loader.list_groups("") if g != "hydra" and g in cfg}
    return groups, [str(k) for k in cfg if k not in groups]


CASES = [("optimize", group, option) for group, options in _groups_and_keys("optimize")[0].items()
         for option in options]  # optimize's groups: every group of every app
def _own_keys() -> list[tuple[str, str]]:
    """For each app, a key of its config that no app before it in `APPS` has (the shared ones once)."""
    seen: set[str] = set()
    picked = []
    for app in APPS:
        keys = [key for key in _groups_and_keys(app)[1] if key not in seen]
        picked += [(app, key) for key in keys[:2]]
        seen.update(_groups_and_keys(app)[1])
    return picked


KEYS = _own_keys()


@pytest.mark.parametrize(("app", "group", "option"), CASES)
def test_a_misspelt_group_option_names_the_option(app, group, option):
    line = override_error([f"{group}={option}{option[-1]}"], app, f"memtrace {app}")
    assert line is not None and f"did you mean {group}={option}?" in line, line
    assert f"{option}{option[-1]}" not in line and "\n" not in line


@pytest.mark.parametrize(("app", "key"), KEYS)
def test_a_misspelt_key_names_the_key_and_not_the_value(app, key):
    typo = key[:-1] + key[-1] * 2
    line = override_error([f"{typo}={VALUE}"], app, f"memtrace {app}")
    assert line is not None and line.startswith(f"memtrace {app}: ") and f"did you mean {key}" in line, line
    assert VALUE not in line and "\n" not in line


@pytest.mark.parametrize("argv", [
    ["memory_system=rag", "memory_system.top_k=5", "lm.task.max_tokens=64"],
    ["-m", "optimizer=attribution,none", "seed=0,1"],  # a sweep: every option exists
    ["-m", "optimizer=glob(*)", "seed=range(0,2)"],
    ["+memory_system.brand_new_knob=1"],  # an appended key that is no near miss: Hydra and the app decide
    ["--cfg", "job"],
    ["--help"],
])
def test_valid_overrides_pass(argv):
    assert override_error(argv, "optimize", "memtrace optimize") is None


def test_a_misspelt_option_inside_a_sweep_is_found():
    line = override_error(["-m", "optimizer=none,atribution"], "optimize", "memtrace optimize")
    assert line is not None and "did you mean optimizer=attribution?" in line


def test_the_suggestions_come_from_the_chosen_group_option():
    """`memory_system=custom` has no `top_k`: no did-you-mean borrowed from the default system's keys."""
    line = override_error(["memory_system=custom", f"memory_system.top_kk={VALUE}"], "run", "memtrace run")
    assert line is not None and "did you mean" not in line and "under 'memory_system': " in line, line
    assert "knobs" in line and VALUE not in line


def test_the_dispatcher_checks_overrides_once_then_runs_the_app_unguarded(monkeypatch):
    import io
    import sys

    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig
    from memtrace_loop.experiments import cli, override_errors

    # Hydra's singletons, set by the in-process launch below, go back as they were (later apps tests
    # in this process must not see a job's config)
    monkeypatch.setattr(HydraConfig.instance(), "cfg", HydraConfig.instance().cfg)
    monkeypatch.setattr(GlobalHydra.instance(), "hydra", GlobalHydra.instance().hydra)
    calls: list[tuple[object, ...]] = []
    real = override_errors.override_error
    monkeypatch.setattr(override_errors, "override_error", lambda *args: calls.append(args) or real(*args))
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    monkeypatch.setattr(sys, "argv", ["memtrace"])
    assert cli.main(["export", "--cfg", "job"]) == 0
    assert len(calls) == 1  # the app's own guard would compose the config a second time
    assert "run_id" in out.getvalue()  # the app ran: Hydra printed its config
