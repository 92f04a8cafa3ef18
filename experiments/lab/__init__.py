"""The lab: what measures MemTrace Loop, apart from the product the `memtrace` commands need.

The attribution and rescue benchmarks (`benchmark/`), the benches `make bench` runs (`bench/`) and
the figures of docs/results.md (`docs_results`). No product module imports this package
(`tests/unit/test_layers.py`); the lab imports the product freely.
"""
