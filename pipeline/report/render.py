"""report.html: one self-contained page (inline CSS and JS, no network) from a `ReportData`.

The overview is rendered here through `html.escape`, charts as inline SVG; the failures travel as escaped
JSON that the page's script draws with DOM calls only (never `innerHTML`), under a Content-Security-Policy
that forbids every request. Node values are stored once per conversation, cut at `MAX_VALUE_CHARS`.
"""

from __future__ import annotations

import html
import json
import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memtrace_loop.pipeline.analysis.attribution.records import Attribution
from memtrace_loop.pipeline.analysis.blame import BlameTable, aggregate_blame
from memtrace_loop.pipeline.analysis.evaluation import MetricSummary
from memtrace_loop.pipeline.loop.summaries import IterationSummary
from memtrace_loop.pipeline.report.assets import PAGE_CSS, PAGE_JS
from memtrace_loop.pipeline.report.data import DiagnosisGroup, ReportData, Rewrite
from memtrace_loop.pipeline.report.subgraph import failure_subgraph, layout

MAX_VALUE_CHARS = 2000
DATA_ELEMENT_ID = "report-data"
CSP = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:"

_JSON_ESCAPES = (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029"))


def json_for_script(payload: Any) -> str:
    """`payload` as JSON that is safe inside a `<script>` element: no `<`, `>` or `&` appears raw (so
    neither `</script>` nor `<!--` can), and JSON.parse reads it back unchanged."""
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    for raw, escaped in _JSON_ESCAPES:
        text = text.replace(raw, escaped)
    return text


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _cut(text: str) -> str:
    return text if len(text) <= MAX_VALUE_CHARS else text[:MAX_VALUE_CHARS] + f"… [{len(text) - MAX_VALUE_CHARS} more]"


def _pct(value: float) -> str:
    return "–" if math.isnan(value) else f"{100 * value:.1f}%"


def _grid(heads: Sequence[str], body: str, attrs: str = "", caption: str = "") -> str:
    """A `grid` table: the column heads (HTML) above the rows `body`."""
    head = "".join(f"<th>{h}</th>" for h in heads)
    return f"<table class=grid{attrs}>{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


# ---------------------------------------------------------------- failures as JSON


def _attribution_json(found: Attribution | None) -> dict[str, Any] | None:
    if found is None:
        return None
    return {
        "type": found.error_type.value, "stage": found.stage, "op": found.op, "op_name": found.op_name,
        "reason": found.reason, "verified": found.verified, "check": found.check.value, "method": found.method,
        "confidence": round(found.confidence, 3), "tunable": found.tunable.value,
        "evidence": list(found.evidence), "pseudo": found.pseudo_evidence,
        "joint": [f"{f.op_name} ({f.stage}, {f.error_type.value})" for f in found.joint],
        "alternatives": [f"{f.op_name} ({f.stage}, {f.tunable.value})" for f in found.alternatives],
    }


def failures_payload(data: ReportData) -> dict[str, Any]:
    """The JSON the page's script reads: node tables per conversation and one record per failure."""
    attribution_by_question = data.attribution_by_question()
    nodes_by_conversation: dict[str, dict[str, list[str]]] = {}
    failures = []
    for case in data.failures():
        question = case.question
        found = attribution_by_question.get(question.id)
        graph = data.graph_by_conversation.get(question.conversation_id)
        drawing: dict[str, Any] | None = None
        if graph is not None:
            sub = failure_subgraph(graph, case, found, data.max_nodes)
            placed = layout(sub)
            table = nodes_by_conversation.setdefault(question.conversation_id, {})
            for node in sub.nodes:
                if node.id not in table:
                    table[node.id] = [node.kind, node.label, _cut(node.value)]
            role_by_id = {n.id: (n.role, n.failed) for n in sub.nodes}
            drawing = {
                "w": placed.width, "h": placed.height,
                "nodes": [[p.id, p.x, p.y, *role_by_id[p.id]] for p in placed.placed],
                "edges": [list(e) for e in sub.edges], "vedges": [list(e) for e in sub.version_edges],
                "elided": dict(sub.elided_by_kind), "note": sub.note,
            }
        failures.append({
            "qid": question.id, "conv": question.conversation_id, "category": question.category_name,
            "question": question.text, "gold": question.gold, "answer": case.prediction,
            "verdict": case.verdict, "error": case.error, "evidence": list(question.evidence),
            "attr": _attribution_json(found), "graph": drawing,
        })
    return {"nodes": nodes_by_conversation, "failures": failures}


# ---------------------------------------------------------------- overview (static HTML)


def _accuracy_bar(summary: MetricSummary, width: int = 160) -> str:
    if summary.n == 0 or math.isnan(summary.judge_accuracy):
        return ""
    acc, low, high = (max(0.0, min(1.0, v)) * width for v in (summary.judge_accuracy, summary.ci_low, summary.ci_high))
    return (
        f'<svg class="bar" width="{width + 2}" height="16" role="img" aria-label="accuracy and interval">'
        f'<rect x="1" y="3" width="{width}" height="10" class="track"/>'
        f'<rect x="1" y="3" width="{acc:.1f}" height="10" class="fill"/>'
        f'<line x1="{low + 1:.1f}" x2="{high + 1:.1f}" y1="8" y2="8" class="ci"/>'
        f'<line x1="{low + 1:.1f}" x2="{low + 1:.1f}" y1="4" y2="12" class="ci"/>'
        f'<line x1="{high + 1:.1f}" x2="{high + 1:.1f}" y1="4" y2="12" class="ci"/></svg>'
    )


def _accuracy_table(data: ReportData) -> str:
    rows = [("overall", data.report.overall), *data.report.by_category.items()]
    body = "".join(
        f"<tr><td>{_e(name)}</td><td class=num>{s.n}</td><td class=num>{_pct(s.judge_accuracy)}</td>"
        f"<td class=num>[{_pct(s.ci_low)}, {_pct(s.ci_high)}]</td><td class=num>{s.f1:.3f}</td>"
        f"<td>{_accuracy_bar(s)}</td></tr>"
        for name, s in rows
    )
    excluded = ", ".join(str(c) for c in data.report.excluded_categories)
    note = f"<p class=muted>Overall leaves out categories {_e(excluded)}.</p>" if excluded else ""
    caption = f"<caption>{_e(data.accuracy_label or 'every judged question of the run')}</caption>"
    heads = ("category", "n", "judge accuracy", "95% interval", "F1", "")
    return f"<h2>Accuracy per category</h2>{_grid(heads, body, ' id=accuracy', caption)}{note}"


def _blame_table(blame: BlameTable, label: str = "") -> str:
    heading = f"<h2>Blame per stage{_e(f' — {label}' if label else '')}</h2>"
    if not blame.rows:
        return f"{heading}<p class=muted>No attributed failures.</p>"
    types = sorted({t for row in blame.rows for t in row.count_by_error_type})
    body = "".join(
        f"<tr><td>{_e(row.stage)}</td><td>{_e(row.tunable.value)}</td><td class=num>{row.count}</td>"
        f"<td class=num>{_pct(row.share)}</td>"
        + "".join(f"<td class=num>{row.count_by_error_type.get(t, 0)}</td>" for t in types)
        + f"<td class=num>{row.verified}</td><td class=num>{row.refuted}</td><td class=num>{row.unverifiable}</td>"
        f"<td class=num>{row.count - row.verified - row.refuted - row.unverifiable}</td>"
        f'<td><svg class="bar" width="122" height="16"><rect x="1" y="3" width="{120 * row.share:.1f}" height="10" '
        f'class="fill blame"/></svg></td></tr>'
        for row in blame.rows
    )
    heads = ("stage", "tunable", "failures", "share", *map(_e, types), "verified", "refuted", "unverifiable",
             "unchecked", "")
    return heading + _grid(heads, body)


def _diagnosis(text: str | None, groups: Sequence[DiagnosisGroup]) -> str:
    if not text and not groups:
        return ""
    paragraphs = "".join(f"<p>{_e(p)}</p>" for p in (text or "").split("\n\n") if p.strip())
    rows = "".join(
        f"<tr><td>{_e(g.stage)}</td><td>{_e(g.error_type)}</td><td class=num>{g.count}</td>"
        f"<td>{_e(', '.join(g.question_ids))}</td><td>{_e(g.note)}</td></tr>"
        for g in groups
    )
    table = _grid(("stage", "error type", "failures", "examples", "note"), rows) if groups else ""
    return f'<section id="diagnosis"><h2>Diagnosis</h2>{paragraphs}{table}</section>'


def scores_chart(history: Sequence[IterationSummary], width: int = 480, height: int = 200) -> str:
    """Dev accuracy (with its interval) and train accuracy per iteration, as an inline SVG line chart."""
    if not history:
        return ""
    left, right, top, bottom = 40, 12, 12, 28
    n = len(history)

    def x(i: int) -> float:
        return left + (width - left - right) * (i / (n - 1) if n > 1 else 0.5)

    def y(v: float) -> float:
        v = 0.0 if math.isnan(v) else max(0.0, min(1.0, v))
        return top + (height - top - bottom) * (1 - v)

    parts = [f'<svg class="chart" width="{width}" height="{height}" role="img" aria-label="scores per iteration">']
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        level = f"{y(tick):.1f}"
        parts.append(f'<line class="gridline" x1="{left}" x2="{width - right}" y1="{level}" y2="{level}"/>'
                     f'<text class="axis" x="{left - 4}" y="{y(tick) + 4:.1f}" text-anchor="end">'
                     f"{int(tick * 100)}%</text>")
    for i, item in enumerate(history):
        parts.append(f'<line class="ci" x1="{x(i):.1f}" x2="{x(i):.1f}" y1="{y(item.dev_ci[0]):.1f}" '
                     f'y2="{y(item.dev_ci[1]):.1f}"/>')
        parts.append(f'<text class="axis" x="{x(i):.1f}" y="{height - 8}" text-anchor="middle">{item.iteration}</text>')
    for name, values in (("train", [h.train_accuracy for h in history]), ("dev", [h.dev_accuracy for h in history])):
        points = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(values))
        parts.append(f'<polyline class="line {name}" points="{points}"/>')
        parts.extend(f'<circle class="dot {name}" cx="{x(i):.1f}" cy="{y(v):.1f}" r="3"><title>{name} iteration '
                     f'{history[i].iteration}: {_pct(v)}</title></circle>' for i, v in enumerate(values))
    parts.append("</svg>")
    return "".join(parts)


def _diff_html(diff: str) -> str:
    lines = []
    for line in diff.splitlines():
        css = "add" if line.startswith("+") and not line.startswith("+++") else (
            "del" if line.startswith("-") and not line.startswith("---") else "ctx")
        lines.append(f'<span class="{css}">{_e(line)}</span>')
    return "<pre class=diff>" + "\n".join(lines) + "</pre>"


def _optimization(history: Sequence[IterationSummary], rewrites: Sequence[Rewrite]) -> str:
    if not history and not rewrites:
        return ""
    rows = "".join(
        f"<tr><td class=num>{h.iteration}</td><td class=num>{_pct(h.train_accuracy)}</td>"
        f"<td class=num>{_pct(h.dev_accuracy)}</td><td class=num>[{_pct(h.dev_ci[0])}, {_pct(h.dev_ci[1])}]</td>"
        f"<td>{_e(', '.join(h.accepted.stages) if h.accepted else '')}</td></tr>"
        for h in history
    )
    heads = ("iteration", "train before", "dev before", "dev interval", "accepted rewrite")
    table = _grid(heads, rows) if history else ""
    accepted = "".join(
        f'<details class="rewrite"><summary>iteration {r.iteration}: {_e(", ".join(r.stages))} '
        f"(gain {r.gain:+.3f}, interval [{r.gain_ci[0]:+.3f}, {r.gain_ci[1]:+.3f}])</summary>"
        f"<p>{_e(r.rationale)}</p>{_diff_html(r.diff) if r.diff else '<p class=muted>no instruction changed</p>'}"
        "</details>"
        for r in rewrites
    )
    legend = (
        '<p class=legend><span class="key dev"></span>dev <span class="key train"></span>train: accuracy of the '
        "prompt set each iteration started from (before its candidates)</p>"
    )
    return (
        f'<section id="optimization"><h2>Scores per iteration</h2>{scores_chart(history)}{legend}{table}'
        f"<h2>Accepted rewrites</h2>{accepted or '<p class=muted>No rewrite was accepted.</p>'}</section>"
    )


def _failure_section(data: ReportData, n_failures: int) -> str:
    label = data.failures_label
    verdicts = Counter(r.verdict for r in data.failures())
    summary = ", ".join(f"{n} {_e(v)}" for v, n in sorted(verdicts.items()))
    return (
        f'<section id="failures"><h2>Failed questions{_e(f" — {label}" if label else "")} '
        f'(<span id="n-failures">{n_failures}</span>)</h2>'
        f"<p class=muted>{summary}. {len(data.attributions)} attributed. Click a question to see the path from "
        "its evidence turns to its answer.</p>"
        '<div class="filters">'
        '<label>stage <select id="f-stage"><option value="">all</option></select></label>'
        '<label>error type <select id="f-type"><option value="">all</option></select></label>'
        '<label>replay <select id="f-verified"><option value="">all</option>'
        '<option value="verified">verified</option><option value="refuted">refuted</option>'
        '<option value="unverifiable">unverifiable</option><option value="unchecked">not checked</option>'
        '<option value="none">no attribution</option></select></label>'
        '<span id="f-count" class="muted"></span></div>'
        '<div class="split"><div class="list"><table class="grid" id="failure-list"><thead><tr><th>question</th>'
        "<th>category</th><th>verdict</th><th>stage</th><th>error type</th><th>replay</th></tr></thead>"
        '<tbody></tbody></table></div><div id="detail" class="detail"><p class="muted">Select a failed question.'
        "</p></div></div></section>"
    )


def _banner(text: str | None) -> str:
    return f'<div class="banner" id="banner" role="alert">{_e(text)}</div>' if text else ""


def render_report(data: ReportData) -> str:
    """The whole page as one string (see the module doc)."""
    blame = data.blame if data.blame is not None else aggregate_blame(data.attributions)
    payload = failures_payload(data)
    meta = "".join(f"<span><b>{_e(k)}</b> {_e(v)}</span>" for k, v in data.meta.items())
    return (
        "<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>"
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(data.title)}</title><style>{PAGE_CSS}</style></head><body>"
        f'<header><h1>{_e(data.title)}</h1><div class="meta">{meta}</div></header>{_banner(data.banner)}'
        f'<main><section id="overview">{_diagnosis(data.diagnosis, data.diagnosis_groups)}'
        f"{_accuracy_table(data)}{_blame_table(blame, data.failures_label)}</section>"
        f"{_optimization(data.history, data.rewrites)}{_failure_section(data, len(payload['failures']))}</main>"
        f'<script type="application/json" id="{DATA_ELEMENT_ID}">{json_for_script(payload)}</script>'
        f"<script>{PAGE_JS}</script></body></html>\n"
    )


def write_report(data: ReportData, path: str | Path) -> Path:
    """Write `render_report(data)` to `path` (parents created); returns the path."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render_report(data), encoding="utf-8")
    return target

