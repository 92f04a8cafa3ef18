"""report.html: the page a person opens to see why a run's questions failed (`run_report` is the one call an app
makes; `data`, `subgraph`, `layout` and `render` build the page)."""
