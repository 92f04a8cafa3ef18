"""The README works as written: every `memtrace <command> ...` it shows (in shell blocks, in inline
code, through `make <target> VAR=...`, and the examples of `memtrace --help`) composes with Hydra and
passes the command's validation, so a typo in an override fails here; and the graph-loading snippet
of "The execution graph" runs after a real `memtrace run`, as a user would paste it."""

from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from hydra.core.override_parser.overrides_parser import OverridesParser
from memtrace_loop.experiments import cli, config, graph_command
from memtrace_loop.experiments.factory import to_plain
from memtrace_loop.pipeline.core.graph_io import load_graph
from memtrace_loop.pipeline.interop.exec_network import full_node_ids

from tests.support.paths import REPO
from tests.support.requires import import_or_fail

README = REPO / "README.md"
MAKEFILE = REPO / "Makefile"
FENCE = re.compile(r"^```(?P<lang>[\w-]*)\n(?P<body>.*?)^```", re.S | re.M)
INLINE = re.compile(r"`((?:\.venv/bin/)?memtrace [^`\n]+)`")
SHELLS = ("bash", "sh", "shell", "console", "")
FLAGS_WITH_VALUE = ("--cfg", "-c", "--package", "-p", "--info", "-sc", "--shell-completion")
FLAGS = ("-m", "--multirun", "--help", "-h", "--hydra-help", "--resolve", "--run", "-r")
VALIDATOR_BY_APP = {"run": config.validated_run, "optimize": config.validated_optimize,
                    "attribute": config.validated_attribute, "report": config.validated_report,
                    "stages": config.validated_stages, "compare": config.validated_compare,
                    "export": config.validated_export, "upload": config.validated_upload}


@dataclass(frozen=True)
class Command:
    where: str  # file:line
    text: str  # as written
    app: str
    args: tuple[str, ...]


GROUPS = {p.name for p in (REPO / "conf").iterdir() if p.is_dir() and not p.name.startswith("_")} | {"experiment"}
ANY = "PLACEHOLDER"  # what `<...>` stands for: dropped for a config group (`optimizer=<optimizer>`), else a word


def placeholders_filled(line: str) -> str:
    """`<mlflow run id>`, `<run>`, `<optimizer>` and a bare `...` value become one word."""
    return re.sub(r"=\.\.\.(?=\s|$)", "=x", re.sub(r"<[^<>\n]*>", ANY, line))


def shell_lines(body: str) -> list[tuple[int, str]]:
    """(line offset, command) of a shell block: continuations joined, comments kept for shlex."""
    lines: list[tuple[int, str]] = []
    pending, start = "", 0
    for offset, line in enumerate(body.splitlines()):
        if not pending:
            start = offset
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        lines.append((start, pending + line))
        pending = ""
    return lines


def make_recipes() -> dict[str, list[str]]:
    """Makefile target -> its recipe lines."""
    recipes: dict[str, list[str]] = {}
    target = None
    for line in MAKEFILE.read_text().splitlines():
        match = re.match(r"^([\w.-]+):", line)
        if match:
            target = match.group(1)
            recipes[target] = []
        elif line.startswith("\t") and target:
            recipes[target].append(line.strip())
    return recipes


def commands_of(words: list[str], where: str, text: str) -> list[Command]:
    """The memtrace commands a shell line runs: `memtrace <app> ...` or `make <target> VAR=...`."""
    for i, word in enumerate(words):
        if Path(word).name == "memtrace" and i + 1 < len(words):
            return [Command(where, text, words[i + 1], tuple(words[i + 2:]))]
    if words[:1] == ["make"] and len(words) > 1:
        variables = dict(w.split("=", 1) for w in words[2:] if "=" in w)
        found = []
        for recipe in make_recipes().get(words[1], []):
            if "memtrace" not in recipe:
                continue
            expanded = re.sub(r"\$\((\w+)\)", lambda m: variables.get(m.group(1), ""), recipe)
            found += commands_of(shlex.split(expanded, comments=True), where, text)
        return found
    return []


def readme_commands() -> list[Command]:
    markdown = README.read_text(encoding="utf-8")
    found: list[Command] = []
    for block in FENCE.finditer(markdown):
        if block.group("lang") not in SHELLS:
            continue
        first = markdown.count("\n", 0, block.start("body")) + 1
        for offset, line in shell_lines(block.group("body")):
            text = placeholders_filled(line).replace('"$(', "").replace(')"', "")  # eval "$(memtrace ...)"
            found += commands_of(shlex.split(text, comments=True), f"README.md:{first + offset}", line.strip())
    outside = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), markdown)
    outside = re.sub(r"(?m)^#.*$", "", outside)  # a heading names a command, it does not run one
    for match in INLINE.finditer(outside):
        text = placeholders_filled(match.group(1))
        words = shlex.split(text)
        if len(words) > 1 and words[1] in cli.COMMAND_NAMES and all("=" in w or w.startswith("-") for w in words[2:]):
            found += commands_of(words, f"README.md:{outside.count(chr(10), 0, match.start()) + 1}", match.group(1))
    return found


def help_commands() -> list[Command]:
    found: list[Command] = []
    for number, line in enumerate(cli.USAGE.splitlines(), 1):
        if line.strip().startswith("memtrace "):
            text = placeholders_filled(line.strip())
            found += commands_of(shlex.split(text, comments=True), f"memtrace --help:{number}", line.strip())
    return found


ALL = readme_commands() + help_commands()


def test_the_readme_shows_commands_of_every_kind():
    """The collection itself can fail: it must find the README's set-up, run, optimize and sweep lines."""
    apps = {c.app for c in ALL}
    assert {"run", "optimize", "attribute", "report", "export", "compare", "upload", "stages", "graph"} <= apps
    assert any("-m" in c.args for c in ALL)  # `make compare` expanded from the Makefile
    assert len([c for c in ALL if c.where.startswith("README")]) >= 25


def overrides_to_compose(args: tuple[str, ...]) -> tuple[list[str], bool]:
    """The overrides of a command line (flags dropped) and whether it is a multirun."""
    overrides: list[str] = []
    multirun, skip = False, False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg in ("-m", "--multirun"):
            multirun = True
        elif arg in FLAGS_WITH_VALUE:
            skip = True
        elif arg not in FLAGS:
            assert not arg.startswith("-"), f"unknown flag {arg!r}"
            key, _, value = arg.partition("=")
            if value == ANY and key.lstrip("+~") in GROUPS:
                continue  # any option of the group
            overrides.append(arg.replace(ANY, "x"))
    return overrides, multirun


def first_of_each_sweep(overrides: list[str]) -> list[str]:
    """A multirun's overrides with every sweep (`a=1,2`) replaced by its first value, parsed by Hydra."""
    single = []
    for override in OverridesParser.create().parse_overrides(overrides):
        if override.is_sweep_override():
            value = next(iter(override.sweep_string_iterator()))
            single.append(f"{override.get_key_element()}={value}")
        else:
            single.append(override.input_line or "")
    return single


@pytest.mark.parametrize("command", ALL, ids=[f"{c.where}: {c.text}" for c in ALL])
def test_every_memtrace_command_shown_composes_and_validates(command, monkeypatch, tmp_path):
    for name in ("OPENAI_API_KEY", "MY_KEY_VAR"):
        monkeypatch.setenv(name, "sk-test-not-real")
    monkeypatch.chdir(tmp_path)
    if command.app == "completion":
        assert command.args in ((), ("bash",))
        return
    if command.app == "graph":  # a file utility (argparse), not a Hydra app: the line must parse
        graph_command.parser().parse_args(list(command.args))
        return
    assert command.app in cli.COMMAND_NAMES, f"{command.where}: no command {command.app!r}"
    overrides, multirun = overrides_to_compose(command.args)
    if multirun:
        overrides = first_of_each_sweep(overrides)
    with initialize_config_module(config_module="memtrace_loop.conf", version_base="1.3"):
        cfg = compose(command.app, overrides=overrides)
    VALIDATOR_BY_APP[command.app](to_plain(cfg))


def test_a_typo_in_an_override_fails_the_check():
    with initialize_config_module(config_module="memtrace_loop.conf", version_base="1.3"):
        with pytest.raises(Exception, match="top_kk"):
            compose("run", overrides=["memory_system.top_kk=5"])
        cfg = compose("run", overrides=["workers=0"])
    with pytest.raises(Exception, match="workers"):
        config.validated_run(to_plain(cfg))


# --------------------------------------------------------------------------- the graph snippet


def section(markdown: str, heading: str) -> str:
    start = markdown.index(f"\n{heading}\n")
    end = markdown.find("\n## ", start + len(heading) + 2)
    return markdown[start: end if end != -1 else len(markdown)]


def graph_snippet() -> str:
    blocks = [m.group("body") for m in FENCE.finditer(section(README.read_text(), "## The execution graph"))
              if m.group("lang") == "python"]
    assert len(blocks) == 1, "the section shows one Python block"
    return blocks[0]


@pytest.fixture(scope="module")
def user_run(tmp_path_factory):
    """`memtrace run` as the README says (one conversation, to be quick), output captured as in a log:
    not a terminal, no COLUMNS (80 columns)."""
    cwd = tmp_path_factory.mktemp("user")
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env |= {"MLFLOW_TRACKING_URI": f"sqlite:///{cwd}/mlflow.db", "MEMTRACE_CACHE_DIR": str(cwd / "cache")}
    done = subprocess.run(
        [str(Path(sys.executable).parent / "memtrace"), "run", "dataset.n_conversations=1", "tracking.traces=false"],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return cwd, done.stdout


@pytest.mark.slow  # a real `memtrace run` (~10 s)
def test_the_graph_snippet_runs_as_written_after_memtrace_run(user_run):
    cwd, _ = user_run
    snippet = graph_snippet()
    done = subprocess.run([sys.executable, "-c", snippet], cwd=cwd, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    printed = done.stdout.splitlines()
    assert printed[0].startswith("['turn:")
    promised = [line.split("#", 1)[1].strip() for line in snippet.splitlines() if "print(" in line]
    for shown, comment in zip(printed, promised, strict=True):  # a comment that is a literal is the output
        if comment.startswith("["):
            assert ast.literal_eval(shown) == ast.literal_eval(comment)


# --------------------------------------------------------------------------- the smartcomment snippet


def smartcomment_snippet() -> str:
    blocks = [m.group("body") for m in FENCE.finditer(section(README.read_text(), "## Graph interop with the "
                                                                                   "reference tooling"))
              if m.group("lang") == "python" and "smartcomment" in m.group("body")]
    assert len(blocks) == 1, "the section shows one smartcomment block"
    return blocks[0]


@pytest.mark.slow  # after the real `memtrace run` of the module
def test_the_smartcomment_snippet_runs_on_a_converted_run_graph(user_run):
    import_or_fail("smartcomment", "smartcomment 0.1.2 is installed by `make`")
    cwd, _ = user_run
    (graph_file,) = cwd.glob("outputs/run/*/artifacts/graphs/sim-0-0.json")
    memtrace = str(Path(sys.executable).parent / "memtrace")
    converted = subprocess.run([memtrace, "graph", "convert", str(graph_file.relative_to(cwd)), "conv.exec.json",
                                "--to", "exec-network"], cwd=cwd, capture_output=True, text=True, timeout=120,
                               check=False)
    assert converted.returncode == 0, converted.stderr
    done = subprocess.run([sys.executable, "-c", smartcomment_snippet()], cwd=cwd, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    turns, queries = done.stdout.splitlines()
    reached = ast.literal_eval(turns)
    assert reached and all(t.startswith("Usim-0-0:D") for t in reached)
    ours = load_graph(graph_file)
    answer = ours.latest("answer:sim-0-0:q3")
    assert answer is not None
    full_ids = full_node_ids(ours)  # our ids as the export names them
    expected = sorted(full_ids[n] for n in ours.ancestors(answer.id) if n.startswith("turn:"))
    assert reached == expected  # smartcomment's bfs reaches the same turns as our ancestors
    assert int(queries) == len(ours.names("query:"))
