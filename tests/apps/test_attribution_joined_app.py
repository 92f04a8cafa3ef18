"""`attribute` and `report` joined up (issue 25, item 9), as a user runs them: a real `memtrace run` (sim
world, temp MLflow sqlite store), then `memtrace attribute run_dir=<run> attributor.verify=true`, then
`memtrace report`: the page shows the verified attribution (each failure's replay check, the blame
table's verified/unchecked columns), says which attribution it is, and counts failures as `attribute`
printed them; from the run's folder, from the attribute folder and from the MLflow run (the attribute
run is the source run's child). A later attribution replaces it. `memtrace graph convert --to
exec-network` of the run exports one MemTraceBench label per attributed failure, with its check, and
smartcomment's own loader keeps them."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest
from memtrace_loop.experiments import cli
from memtrace_loop.experiments.attribute import attribute
from memtrace_loop.experiments.report import report
from memtrace_loop.experiments.run import run
from memtrace_loop.pipeline.interop.exec_network import load_exec_network
from mlflow.tracking import MlflowClient
from rich.console import Console

from tests.support.compose import composed as compose_app
from tests.support.requires import import_or_fail
from tests.support.store import fresh_store

pytestmark = pytest.mark.usefixtures("mlflow_db")

SMALL = ["dataset.n_conversations=2", "workers=2"]


def composed(config: str, tmp_path: Path, *overrides: str):
    return compose_app(config, f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", f"cache_dir={tmp_path}/cache",
                       *overrides)


def quiet() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=400, color_system=None), out


def page_of(outcome: dict) -> str:
    return Path(outcome["path"]).read_text(encoding="utf-8")


def payload(page: str) -> dict:
    match = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page, re.S)
    assert match is not None
    return json.loads(match.group(1))


def meta(page: str) -> dict[str, str]:
    header = re.search(r'<div class="meta">(.*?)</div>', page, re.S)
    assert header is not None
    return {k: v for k, v in re.findall(r"<span><b>(.*?)</b> (.*?)</span>", header.group(1))}


def blame_columns(page: str) -> dict[str, int]:
    """The page's blame table: each column's total over the stages."""
    table = re.search(r"<h2>Blame per stage.*?</h2><table class=grid>(.*?)</table>", page, re.S)
    assert table is not None
    heads = re.findall(r"<th>(.*?)</th>", table.group(1))
    totals: Counter[str] = Counter()
    for row in re.findall(r"<tr><td>.*?</tr>", table.group(1), re.S):
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
        totals.update({head: int(cell) for head, cell in zip(heads, cells, strict=False) if cell.isdigit()})
    return dict(totals)


def checks_by_question(attributions) -> dict[str, str]:
    return {a.question_id: a.check.value for a in attributions}


@pytest.fixture(scope="module")
def attributed(tmp_path_factory):
    """A logged `memtrace run`, then `memtrace attribute run_dir=<it> attributor.verify=true`."""
    tmp_path = tmp_path_factory.mktemp("joined")
    fresh_store(tmp_path / "mlflow.db")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path)
        source = run(composed("run", tmp_path, *SMALL))
        console, printed = quiet()
        said = _Said()
        lm_log = logging.getLogger("memtrace_loop.pipeline.backends.lm")
        lm_log.addHandler(said)
        level = lm_log.level
        lm_log.setLevel(logging.INFO)
        try:  # every LM role's response cache off: attribute must not announce one
            done = attribute(composed("attribute", tmp_path, f"run_dir={source['run_dir']}", "attributor.verify=true",
                                      "lm.task.cache=false"), console=console)
        finally:
            lm_log.removeHandler(said)
            lm_log.setLevel(level)
    return tmp_path, source, done, printed.getvalue() + "\n".join(said.lines)


class _Said(logging.Handler):
    """The messages of one logger, kept (a module-scoped fixture cannot use caplog)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_attribute_announces_no_response_cache_when_every_lm_role_has_it_off(attributed):
    *_, printed = attributed
    assert "DSPy response cache at" not in printed


def test_report_shows_the_verified_attribution_made_last_and_counts_as_attribute(attributed, monkeypatch):
    tmp_path, source, done, printed = attributed
    monkeypatch.chdir(tmp_path)
    verified = checks_by_question(done["attributions"])
    assert "verified" in verified.values() and "unchecked" not in verified.values()
    outcome = report(composed("report", tmp_path, f"run_dir={source['run_dir']}", "log=false"), console=quiet()[0])
    page = page_of(outcome)
    shown = {f["qid"]: f["attr"]["check"] for f in payload(page)["failures"] if f["attr"]}
    assert shown == verified  # every failure with the replay's verdict, none of the run's unchecked ones
    columns = blame_columns(page)
    assert columns["verified"] == sum(row.verified for row in done["blame"].rows) > 0
    assert columns["unchecked"] == 0
    header = meta(page)
    assert "verify on" in header["attribution"] and "memtrace attribute" in header["attribution"]
    assert done["out_dir"] in header["attribution"]
    # one count, said the same way by both commands: attributed of scored failures
    count = re.search(r"\d+ of \d+ scored failures attributed", " ".join(printed.split()))  # a title wraps
    assert count is not None and header["attributed"].startswith(count.group(0))
    assert count.group(0) == f"{len(shown)} of {len(payload(page)['failures'])} scored failures attributed"
    assert f"report run_dir={source['run_dir']}" in printed  # what to run next to see it


def test_the_attribute_folder_and_the_mlflow_run_show_the_same_attribution(attributed, monkeypatch):
    tmp_path, source, done, _ = attributed
    monkeypatch.chdir(tmp_path)
    verified = checks_by_question(done["attributions"])
    of_folder = report(composed("report", tmp_path, f"run_dir={done['out_dir']}", "log=false"), console=quiet()[0])
    assert checks_by_question(of_folder["attributions"]) == verified
    of_run = report(composed("report", tmp_path, f"run_id={source['run_id']}"), console=quiet()[0])
    assert checks_by_question(of_run["attributions"]) == verified
    assert done["run_id"] in meta(page_of(of_run))["attribution"]
    # MLflow: the attribute run is the source run's child, and the source run names its latest attribution
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    tags = client.get_run(done["run_id"]).data.tags
    assert tags["mlflow.parentRunId"] == tags["memtrace.source_run_id"] == source["run_id"]
    assert "latest_attribution.json" in {a.path for a in client.list_artifacts(source["run_id"])}
    # an attribution of the logged run, not logged itself: its folder's report shows it, the run keeps its latest
    unlogged = attribute(composed("attribute", tmp_path, f"run_id={source['run_id']}", "log=false"),
                         console=quiet()[0])
    of_unlogged = report(composed("report", tmp_path, f"run_dir={unlogged['out_dir']}", "log=false"),
                         console=quiet()[0])
    assert set(checks_by_question(of_unlogged["attributions"]).values()) == {"unchecked"}
    assert checks_by_question(of_unlogged["attributions"]).keys() == verified.keys()


def test_a_later_attribution_replaces_the_verified_one(attributed, tmp_path, monkeypatch):
    _, source, first, _ = attributed
    monkeypatch.chdir(tmp_path)
    run_dir = shutil.copytree(source["run_dir"], tmp_path / "run")  # the module's run is left as it is
    second = attribute(composed("attribute", tmp_path, f"run_dir={run_dir}", "log=false"), console=quiet()[0])
    outcome = report(composed("report", tmp_path, f"run_dir={run_dir}", "log=false"), console=quiet()[0])
    assert set(checks_by_question(outcome["attributions"]).values()) == {"unchecked"}
    assert second["out_dir"] in meta(page_of(outcome))["attribution"] and first["out_dir"] != second["out_dir"]
    assert blame_columns(page_of(outcome))["verified"] == 0


def convert(source: Path, target: Path) -> str:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["graph", "convert", str(source), str(target), "--to", "exec-network"])
    assert code == 0, err.getvalue()
    return out.getvalue()


def test_graph_convert_exports_one_label_per_attributed_failure(attributed, tmp_path):
    _, source, done, _ = attributed
    printed = convert(Path(source["run_dir"]) / "artifacts" / "graphs", tmp_path / "exec")
    files = sorted((tmp_path / "exec").glob("*.json"))
    documents = [json.loads(f.read_text(encoding="utf-8")) for f in files]
    labels = [label for d in documents for label in d["data"].get("annotations", ())]
    assert len(labels) == len(done["attributions"]) > 0  # today's code: 0 labels
    assert len(labels) == done["count"].attributed
    assert Counter(label["check"] for label in labels) == Counter(a.check.value for a in done["attributions"])
    assert "verify on" in printed
    convert(Path(source["run_dir"]), tmp_path / "of-run")  # the run folder stands for its graphs
    assert [f.read_bytes() for f in sorted((tmp_path / "of-run").glob("*.json"))] == [f.read_bytes() for f in files]
    # our reader and smartcomment's own loader read them back
    assert sum(len(load_exec_network(f).annotations) for f in files) == len(labels)
    exec_network = import_or_fail("smartcomment.runtime", "smartcomment 0.1.2 is installed by `make`").ExecNetwork
    for document in documents:
        network = exec_network.import_graph(json.loads(json.dumps(document)))
        back = network.export_graph()
        kept = back["metadata"]["annotations"]
        assert kept == document["data"].get("annotations", [])
        operations = {op["op_id"] for op in back["data"]["operations"]}
        assert {label["final_op_id"] for label in kept} <= operations
