"""The README and every docs/*.md page work as written, page by page:

- every relative link (and `#anchor`) resolves to a file (and a heading) of the checkout;
- every `memtrace <command> ...` a page shows (in shell blocks, in inline code, through
  `make <target> VAR=...`, and the examples of `memtrace --help`) composes with Hydra and passes the
  command's validation, so a typo in an override fails here;
- every Python block parses, and the graph-loading snippet (attribution.md) and the smartcomment
  snippet (interop.md) run after a real `memtrace run`, as a user would paste them;
- the demo's figures (README and docs/results.md, written by `experiments/lab/docs_results.py`) are
  what running the demo gives (slow), the README states no other figure, and the optimizer table is
  what its generator writes."""

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
from memtrace_loop.experiments.lab import docs_results
from memtrace_loop.pipeline.core.graph_io import load_graph
from memtrace_loop.pipeline.interop.exec_network import full_node_ids

from tests.support.paths import REPO
from tests.support.requires import import_or_fail

README = REPO / "README.md"
PAGES = [README, *sorted((REPO / "docs").glob("*.md"))]
PAGE_IDS = [p.relative_to(REPO).as_posix() for p in PAGES]
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
LAB_APPS = {"memtrace_loop.experiments.lab.compare": "compare"}  # `python -m` entry points of the lab, on conf/


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
        if word == "-m" and i + 1 < len(words) and words[i + 1] in LAB_APPS:
            return [Command(where, text, LAB_APPS[words[i + 1]], tuple(words[i + 2:]))]
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


def page_commands(page: Path) -> list[Command]:
    markdown = page.read_text(encoding="utf-8")
    name = page.relative_to(REPO).as_posix()
    found: list[Command] = []
    for block in FENCE.finditer(markdown):
        if block.group("lang") not in SHELLS:
            continue
        first = markdown.count("\n", 0, block.start("body")) + 1
        for offset, line in shell_lines(block.group("body")):
            text = placeholders_filled(line).replace('"$(', "").replace(')"', "")  # eval "$(memtrace ...)"
            found += commands_of(shlex.split(text, comments=True), f"{name}:{first + offset}", line.strip())
    outside = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), markdown)
    outside = re.sub(r"(?m)^#.*$", "", outside)  # a heading names a command, it does not run one
    for match in INLINE.finditer(outside):
        text = placeholders_filled(match.group(1))
        words = shlex.split(text)
        if len(words) > 1 and words[1] in cli.COMMAND_NAMES and all("=" in w or w.startswith("-") for w in words[2:]):
            found += commands_of(words, f"{name}:{outside.count(chr(10), 0, match.start()) + 1}", match.group(1))
    return found


def help_commands() -> list[Command]:
    found: list[Command] = []
    for number, line in enumerate(cli.USAGE.splitlines(), 1):
        if line.strip().startswith("memtrace "):
            text = placeholders_filled(line.strip())
            found += commands_of(shlex.split(text, comments=True), f"memtrace --help:{number}", line.strip())
    return found


ALL = [c for page in PAGES for c in page_commands(page)] + help_commands()


def test_the_pages_show_commands_of_every_kind():
    """The collection itself can fail: it must find the set-up, run, optimize and sweep lines."""
    apps = {c.app for c in ALL}
    assert {"run", "optimize", "attribute", "report", "export", "compare", "upload", "stages", "graph"} <= apps
    assert any("-m" in c.args for c in ALL)  # `make compare` expanded from the Makefile
    assert len([c for c in ALL if c.where.startswith("README")]) >= 15
    assert len([c for c in ALL if c.where.startswith("docs/")]) >= 40


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
    assert command.app in {*cli.COMMAND_NAMES, *LAB_APPS.values()}, f"{command.where}: no command {command.app!r}"
    overrides, multirun = overrides_to_compose(command.args)
    if multirun:
        overrides = first_of_each_sweep(overrides)
    with initialize_config_module(config_module="memtrace_loop.conf", version_base="1.3"):
        cfg = compose(command.app, overrides=overrides)
    if any(arg in ("-h", "--help", "--hydra-help") for arg in command.args):
        return  # Hydra answers help before the app validates anything: composing is what it needs
    VALIDATOR_BY_APP[command.app](to_plain(cfg))


def test_a_typo_in_an_override_fails_the_check():
    with initialize_config_module(config_module="memtrace_loop.conf", version_base="1.3"):
        with pytest.raises(Exception, match="top_kk"):
            compose("run", overrides=["memory_system.top_kk=5"])
        cfg = compose("run", overrides=["workers=0"])
    with pytest.raises(Exception, match="workers"):
        config.validated_run(to_plain(cfg))


# --------------------------------------------------------------------------- links and Python blocks


LINK = re.compile(r"!?\[[^\]\n]*\]\((?P<target>[^)\s]+)\)")


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    outside = FENCE.sub("", page.read_text(encoding="utf-8"))
    found: set[str] = set()
    for heading in re.findall(r"(?m)^#{1,6} (.+)$", outside):
        base, n = slug(heading), 0
        while (candidate := base if n == 0 else f"{base}-{n}") in found:
            n += 1
        found.add(candidate)
    return found


@pytest.mark.parametrize("page", PAGES, ids=PAGE_IDS)
def test_every_link_of_the_page_resolves(page):
    outside = FENCE.sub("", page.read_text(encoding="utf-8"))
    outside = re.sub(r"`[^`\n]*`", "", outside)  # code spans hold no links
    links = [m.group("target") for m in LINK.finditer(outside)]
    broken = []
    for target in links:
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not fetched
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no file {file}")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading #{anchor} in {file.name}")
    assert not broken, broken


def test_the_readme_links_every_docs_page():
    linked = set(re.findall(r"\]\(docs/([\w.-]+\.md)", README.read_text(encoding="utf-8")))
    assert {p.name for p in PAGES[1:]} <= linked


@pytest.mark.parametrize("page", PAGES, ids=PAGE_IDS)
def test_every_python_block_of_the_page_parses(page):
    for block in FENCE.finditer(page.read_text(encoding="utf-8")):
        if block.group("lang") == "python":
            ast.parse(block.group("body"))


def test_the_readme_is_a_ten_minute_read():
    assert len(README.read_text(encoding="utf-8").encode()) <= 16_000


# --------------------------------------------------------------------------- figures


def test_the_readme_states_no_figure_outside_its_generated_block():
    """The README's only measured numbers are the demo sentence `docs_results` writes (and a test checks)."""
    readme = README.read_text(encoding="utf-8")
    start, end = docs_results.between(readme, "demo")
    prose = FENCE.sub("", readme[:start] + readme[end:])
    assert re.findall(r"\b\d+(?:\.\d+)?%", prose) == ["95%"]  # the confidence level, not a measurement
    assert not re.findall(r"\b\d{1,3}(?:,\d{3})+\b", prose)
    assert re.findall(r"\b\d+\.\d+\b", re.sub(r"`[^`\n]*`", "", prose)) == ["3.11"]  # Python 3.11, no accuracy


def test_the_optimizer_table_is_what_its_generator_writes(monkeypatch):
    """`docs_results optimizer-table` (16 optimize runs, too slow here) writes exactly the committed table's
    shape: fed the committed start/final numbers, it gives the committed table back."""
    committed = docs_results.generated(docs_results.RESULTS.read_text(encoding="utf-8"), "optimizer_table").strip()
    numbers = {}
    for line in committed.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        system = cells[0].split()[0]
        for optimizer, cell in zip(docs_results.TABLE_OPTIMIZERS, cells[1:], strict=True):
            start, final = re.findall(r"\d+\.\d", cell)[:2]
            numbers[(system, optimizer)] = (float(start) / 100, float(final) / 100)

    def fake_run(_workdir, system_override, optimizer_override):
        start, final = numbers[(system_override.split("=")[1], optimizer_override.split("=")[1])]
        metrics = {"test/start/judge_accuracy": start, "test/final/judge_accuracy": final}
        return docs_results.OptimizeRun("", Path(), metrics, {})

    monkeypatch.setattr(docs_results, "run_optimize", fake_run)
    assert docs_results.optimizer_table() == committed


def test_a_regenerated_table_rewrites_its_block_and_its_measured_line(tmp_path, monkeypatch):
    """`docs_results` writes a table into its block and today's date and commit into the `Measured on`
    line of its own section, leaving the other sections' lines as they were."""
    results = tmp_path / "results.md"
    section = "## {0}\nMeasured on 2020-01-0{1} at commit {2}.\n\n<!-- figures:{0} -->\nold\n<!-- /figures:{0} -->\n"
    results.write_text(section.format("a", 1, "aaaaaaa") + section.format("b", 2, "bbbbbbb"))
    monkeypatch.setattr(docs_results, "RESULTS", results)
    monkeypatch.setattr(docs_results, "head_commit", lambda: "c0ffee1")
    docs_results.write_table("b", "| new |")
    text = results.read_text()
    assert docs_results.generated(text, "a").strip() == "old" and docs_results.generated(text, "b").strip() == "| new |"
    assert "Measured on 2020-01-01 at commit aaaaaaa." in text and "2020-01-02" not in text
    assert re.search(r"Measured on \d{4}-\d\d-\d\d at commit c0ffee1\.\n\n<!-- figures:b", text)


def normalized(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.slow  # the whole demo (`memtrace optimize`, ~15-50 s)
def test_the_demo_figures_the_docs_state_are_what_the_demo_gives(tmp_path):
    figures = docs_results.run_demo(tmp_path)
    readme = README.read_text(encoding="utf-8")
    results = docs_results.RESULTS.read_text(encoding="utf-8")
    assert normalized(docs_results.generated(readme, "demo")) == normalized(docs_results.demo_sentence(figures))
    assert normalized(docs_results.generated(results, "demo")) == normalized(docs_results.demo_block(figures))


# --------------------------------------------------------------------------- the graph snippet


def python_block(*needles: str) -> str:
    """The one Python block of all pages that contains every needle."""
    blocks = [m.group("body") for page in PAGES for m in FENCE.finditer(page.read_text(encoding="utf-8"))
              if m.group("lang") == "python" and all(n in m.group("body") for n in needles)]
    assert len(blocks) == 1, f"the pages show one Python block with {needles}"
    return blocks[0]


def graph_snippet() -> str:
    return python_block("load_graph(", ".lineage(")


@pytest.fixture(scope="module")
def user_run(tmp_path_factory):
    """`memtrace run` as the docs say (one conversation, to be quick), output captured as in a log:
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
    return python_block("from smartcomment.runtime import ExecNetwork")


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
