"""`memtrace graph`: graph files for and from the reference tooling (smartcomment, MemTraceBench).

    memtrace graph convert IN OUT --to exec-network|memtrace
    memtrace graph show FILE [FILE ...] [--json] [--limit N]

`convert` reads IN in whichever format its content is (`pipeline.interop.graph_files`) and writes OUT
in the `--to` format. MemTraceBench labels travel with an ExecNetwork input; a graph of a saved run
(`<run>/artifacts/graphs/`) exported to ExecNetwork carries the run's latest attribution as its labels
(`run_labels`: the last `memtrace attribute`, else the run's own), and the summary says which. A folder
IN converts every `*.json` in it (not recursive; a run folder stands for its `graphs/`) into the folder
OUT. A file already in the target format is rewritten (normalised); OUT never replaces IN, and every file
is written atomically. `show` prints each file's summary (`pipeline.interop.graph_files`); `--json`
the same as a JSON list.

Plain argparse: no config, no LM, no MLflow, nothing attributed. A missing or unreadable file, invalid
JSON or a document in neither format ends with exit code 2 and one line on stderr naming the file.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path
from types import MappingProxyType

from memtrace_loop.experiments.console_layout import app_console
from memtrace_loop.pipeline.analysis.attribution.records import Attribution
from memtrace_loop.pipeline.core.case_io import cases_from_json
from memtrace_loop.pipeline.core.graph import ExecutionGraph, GraphError
from memtrace_loop.pipeline.core.run_folder import RunFolder
from memtrace_loop.pipeline.data.reader import DataError
from memtrace_loop.pipeline.interop.exec_network import annotation_from_attribution
from memtrace_loop.pipeline.interop.exec_network.labels import BenchAnnotation
from memtrace_loop.pipeline.interop.graph_files import (
    GraphFormat,
    GraphSummary,
    read_graph_file,
    summarize,
    write_graph_file,
)
from memtrace_loop.pipeline.report.attribution_record import AttributionRecord, latest_attributions
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

PROG = "memtrace graph"
TARGETS = tuple(str(f) for f in GraphFormat)
EXIT_USAGE = 2
DEFAULT_LIMIT = 20  # failed questions and labels listed per file by `show` (0: all)


class GraphCommandError(DataError):
    """A request the command refuses (OUT would replace IN, an empty folder...): `<path>: <problem>`."""


def parser() -> argparse.ArgumentParser:
    main = argparse.ArgumentParser(
        prog=PROG, description="Graph files in our JSON (memtrace) and the ExecNetwork JSON of smartcomment and "
                               "MemTraceBench (exec-network); the format of a file is read from its content.")
    commands = main.add_subparsers(dest="command", required=True, metavar="{convert,show}")
    convert = commands.add_parser("convert", help="convert a graph file, or every *.json of a folder, to a format",
                                  description="Convert IN (a graph file, or a folder: every *.json in it) to OUT "
                                              "(a file, or a folder for a folder) in the --to format.")
    convert.add_argument("input", metavar="IN", help="a graph file or a folder of them (*.json, not recursive)")
    convert.add_argument("output", metavar="OUT", help="the file (or, for a folder IN, the folder) to write")
    convert.add_argument("--to", required=True, choices=TARGETS, help="the format to write")
    show = commands.add_parser("show", help="sizes, kinds, failed questions and labels of graph files",
                               description="Print what each graph file holds: format, graph id, sizes, variable "
                                           "and operation kinds, failed operations, the questions judged wrong "
                                           "and MemTraceBench labels.")
    show.add_argument("files", metavar="FILE", nargs="+", help="graph files (either format)")
    show.add_argument("--json", action="store_true", help="print the summaries as JSON (a list, one per file)")
    show.add_argument("--limit", type=int, default=DEFAULT_LIMIT, metavar="N",
                      help=f"failed questions and labels listed per file (default {DEFAULT_LIMIT}; 0: all)")
    return main


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        if args.command == "convert":
            return convert(Path(args.input), Path(args.output), GraphFormat(args.to))
        return show(args.files, as_json=args.json, limit=args.limit)
    except (DataError, GraphError) as error:  # the messages name the file, the record and the field
        sys.stderr.write(f"{PROG}: {' '.join(str(error).split())}\n")
        return EXIT_USAGE


# --------------------------------------------------------------------------- convert


@dataclass(frozen=True)
class RunLabels:
    """A saved run's latest attributions, per conversation, and the record saying which they are."""

    record: AttributionRecord
    by_conversation: Mapping[str, tuple[Attribution, ...]]

    def annotations_for(self, graph: ExecutionGraph) -> tuple[BenchAnnotation, ...]:
        """The labels of the failures of `graph`'s conversation (its `graph_id`), in the graph's ids."""
        return tuple(annotation_from_attribution(a, graph) for a in self.by_conversation.get(graph.graph_id, ()))

    @property
    def total(self) -> int:
        return sum(len(found) for found in self.by_conversation.values())


def saved_run_folder(path: Path) -> Path | None:
    """The folder of the saved run a graph file (or a `graphs/` folder) belongs to; None outside one."""
    folder = path if path.is_dir() else path.parent
    if folder.name == RunFolder.GRAPHS and (folder.parent / RunFolder.CASES).is_file():
        return folder.parent
    return None


def graphs_folder(path: Path) -> Path:
    """`path`, or its `graphs/` folder when it is a run folder (`<run>` or `<run>/artifacts`)."""
    for saved in (path, path / RunFolder.ARTIFACTS):
        if (saved / RunFolder.CASES).is_file() and (saved / RunFolder.GRAPHS).is_dir():
            return saved / RunFolder.GRAPHS
    return path


def _json_file(path: Path) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise DataError(str(path), f"cannot read ({type(error).__name__}: {error})") from error


def run_labels(path: Path) -> RunLabels | None:
    """The latest attributions of the saved run `path` (a graph file or `graphs/` folder) belongs to, as
    labels (`pipeline.report.attribution_record`); None outside a saved run or without attributions."""
    saved = saved_run_folder(path)
    if saved is None:
        return None
    cases = saved / RunFolder.CASES
    results = cases_from_json(cases.read_text(encoding="utf-8"), str(cases))
    config_path = saved / RunFolder.CONFIG
    config = _json_file(config_path) if config_path.is_file() else {}
    chosen = latest_attributions(saved, results, config if isinstance(config, Mapping) else {})
    if chosen is None:
        return None
    grouped: defaultdict[str, list[Attribution]] = defaultdict(list)
    for attribution in chosen.attributions:
        grouped[attribution.case.question.conversation_id].append(attribution)
    return RunLabels(chosen.record, MappingProxyType({k: tuple(v) for k, v in grouped.items()}))


@dataclass(frozen=True)
class Converted:
    source: Path
    target: Path
    found: GraphFormat
    variables: int
    operations: int
    labels: int


def conversion_pairs(source: Path, output: Path) -> list[tuple[Path, Path]]:
    """(input file, output file) pairs for IN and OUT; refuses what would replace an input."""
    if source.is_dir():
        files = sorted(p for p in source.glob("*.json") if p.is_file())
        if not files:
            raise GraphCommandError(str(source), "no *.json file in this folder")
        if output.exists() and not output.is_dir():
            raise GraphCommandError(str(output), "is a file; converting a folder needs a folder as OUT")
        if output.resolve() == source.resolve():
            raise GraphCommandError(str(output), "is the input folder itself; refusing to overwrite its files")
        return [(f, output / f.name) for f in files]
    target = output / source.name if output.is_dir() else output
    if target.resolve() == source.resolve():
        raise GraphCommandError(str(target), "is the input file itself; refusing to overwrite it")
    return [(source, target)]


def convert_one(source: Path, target: Path, to: GraphFormat, labels: RunLabels | None = None) -> Converted:
    """Read `source`, write it to `target` in `to` (into ExecNetwork, `labels` of its run replace its own)."""
    read = read_graph_file(source)
    annotations = labels.annotations_for(read.graph) if labels is not None and to is GraphFormat.EXEC_NETWORK else ()
    write_graph_file(read.graph, target, to, annotations)
    return Converted(source, target, read.format, read.graph.n_variables, read.graph.n_operations,
                     len(annotations or read.annotations))


def convert(source: Path, output: Path, to: GraphFormat) -> int:
    source = graphs_folder(source)
    pairs = conversion_pairs(source, output)
    labels = run_labels(source) if to is GraphFormat.EXEC_NETWORK else None
    started = time.perf_counter()
    done: list[Converted] = []
    if len(pairs) == 1:
        done.append(convert_one(*pairs[0], to, labels))
    else:
        columns = (TextColumn("converting"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TextColumn("{task.description}"))
        bar = Console(stderr=True)
        with Progress(*columns, console=bar, transient=True, disable=not bar.is_terminal) as progress:
            task = progress.add_task("", total=len(pairs))
            for source_file, target_file in pairs:
                progress.update(task, description=source_file.name)
                done.append(convert_one(source_file, target_file, to, labels))
                progress.advance(task)
    seconds = time.perf_counter() - started
    console = app_console(echo=False)
    console.print(Text(conversion_line(source, output, to, done, seconds)))
    if labels is not None:
        written = sum(c.labels for c in done)
        console.print(Text(f"{counted(written, 'label')} from the run's attributions: {labels.record.label()}"))
    return 0


def conversion_line(source: Path, output: Path, to: GraphFormat, done: Sequence[Converted], seconds: float) -> str:
    """The one-line summary of a conversion (files rewritten in their own format said so)."""
    same = [c for c in done if c.found is to]
    if len(done) == 1 and not source.is_dir():
        (one,) = done
        how = f"already {to}: rewritten, normalised" if same else f"{one.found} -> {to}"
        labels = f", {counted(one.labels, 'label')}" if one.labels else ""
        return (f"{one.source} -> {one.target} ({how}): {counted(one.variables, 'variable')}, "
                f"{counted(one.operations, 'operation')}{labels}, {seconds:.2f} s")
    parts = []
    for found in GraphFormat:
        count = sum(c.found is found for c in done)
        if count and found is not to:
            parts.append(f"{count} from {found}")
    if same:
        parts.append(f"{len(same)} already {to} (rewritten, normalised)")
    n_labels = sum(c.labels for c in done)
    if n_labels:
        parts.append(counted(n_labels, "label"))
    return f"{len(done)} files {source} -> {output} as {to}: {', '.join(parts)}; {seconds:.2f} s"


# --------------------------------------------------------------------------- show


def show(paths: Sequence[str], as_json: bool = False, limit: int = DEFAULT_LIMIT) -> int:
    summaries = [summarize(read_graph_file(Path(p))) for p in paths]  # all read before anything is printed
    if as_json:
        sys.stdout.write(json.dumps([s.to_dict() for s in summaries], ensure_ascii=False, indent=1) + "\n")
        return 0
    console = app_console(echo=False)
    width = Console().width  # what `app_console` lays out at: the terminal, else COLUMNS, else 80
    for index, summary in enumerate(summaries):
        if index:
            console.print()
        for block in summary_blocks(summary, width, limit):
            console.print(block, soft_wrap=False)
    return 0


def clip(text: str, width: int) -> str:
    """`text` on one line, cut to `width` characters (an ellipsis marks the cut)."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= width else flat[: max(width - 1, 0)] + "…"


def summary_blocks(summary: GraphSummary, width: int, limit: int = DEFAULT_LIMIT) -> list[Text | Table]:
    """What `show` prints for one file, laid out for `width` columns."""
    blocks: list[Text | Table] = []
    title = Text(summary.path, style="bold")
    title.append(f"  {summary.format}, graph {summary.graph_id}", style="")
    blocks.append(title)
    sizes = (f"{counted(summary.variables, 'variable')}, {counted(summary.operations, 'operation')}, "
             f"{counted(summary.edges, 'edge')}, {counted(summary.failed_operations, 'failed operation')}")
    if summary.document is not None:
        d = summary.document
        sizes += (f"; the document: {counted(d.sessions, 'session')}, {counted(d.nodes, 'node')}, "
                  f"{counted(d.operations, 'operation')}, {counted(d.edges, 'edge')}")
    blocks.append(Text(sizes))
    kinds = Table(box=None, pad_edge=False, show_edge=False, padding=(0, 2, 0, 0))
    for header in ("variable kind", "count", "operation kind", "count"):
        kinds.add_column(header, justify="right" if header == "count" else "left", header_style="bold")
    for variable, operation in zip_longest(summary.variable_kinds, summary.operation_kinds, fillvalue=("", "")):
        kinds.add_row(clip(variable[0], 24), str(variable[1]), clip(operation[0], 24), str(operation[1]))
    blocks.append(kinds)
    if summary.questions:
        blocks += listing(f"Failed questions: {len(summary.failed_questions)} of {summary.questions}", [
            (f"{q.question_id}: {q.verdict}", [f"Q: {q.question}", f"predicted: {q.prediction}", f"gold: {q.gold}"])
            for q in summary.failed_questions], width, limit)
    if summary.annotations:
        blocks += listing(f"MemTraceBench labels: {len(summary.annotations)}", [
            (f"{a.query_id}: {a.final_error_type}" + (f" at {a.final_op_id}" if a.final_op_id else ""),
             [f"Q: {a.query}", f"predicted: {a.prediction}", f"golden: {' | '.join(a.golden_answers)}"])
            for a in summary.annotations], width, limit)
    return blocks


def listing(title: str, entries: list[tuple[str, list[str]]], width: int, limit: int) -> list[Text | Table]:
    """A bold title, up to `limit` entries (0: all) clipped to `width`, then how many were left out."""
    shown = entries if limit <= 0 else entries[:limit]
    text_width = max(width - 6, 20)
    blocks: list[Text | Table] = [Text(title, style="bold")]
    for head, lines in shown:
        indented = ["  " + clip(head, width - 2), *("    " + clip(line, text_width) for line in lines)]
        blocks.append(Text("\n".join(indented), no_wrap=True))
    return blocks + more_line(len(entries) - len(shown))


def counted(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def more_line(hidden: int) -> list[Text | Table]:
    return [Text(f"  ... and {hidden} more (--limit 0 lists all; --json prints everything)")] if hidden > 0 else []


if __name__ == "__main__":
    raise SystemExit(main())
