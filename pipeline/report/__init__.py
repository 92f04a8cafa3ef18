"""report.html: the page a person opens to see why a run's questions failed.

`ReportData` (data), `failure_subgraph` (subgraph), `layout`, `render_report` / `write_report` (render),
`report_for_run` (run_report, the one call an app makes).
"""

from memtrace_loop.pipeline.report.data import (
    DEFAULT_MAX_NODES,
    DiagnosisGroup,
    ReportData,
    Rewrite,
    rewrites_of,
)
from memtrace_loop.pipeline.report.layout import Layout, Placed, layout
from memtrace_loop.pipeline.report.render import json_for_script, render_report, write_report
from memtrace_loop.pipeline.report.run_report import REPORT_FILE, report_for_loop, report_for_run
from memtrace_loop.pipeline.report.subgraph import Role, Subgraph, SubNode, failure_subgraph

__all__ = [
    "DEFAULT_MAX_NODES", "REPORT_FILE", "DiagnosisGroup", "Layout", "Placed", "ReportData", "Rewrite", "Role",
    "SubNode", "Subgraph", "failure_subgraph", "json_for_script", "layout", "render_report", "report_for_loop",
    "report_for_run", "rewrites_of", "write_report"
]
