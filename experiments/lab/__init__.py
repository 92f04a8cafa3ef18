"""The lab: what measures MemTrace Loop, apart from the product the `memtrace` commands need.

The attribution and rescue benchmarks (`benchmark/`), the benches `make bench` runs (`bench/`), the
optimizer comparison behind `make compare` (`compare`, `comparison`) and the
generated figures of docs/results.md (`docs_results`). No product module imports this package nor names
it in a string (`tests/unit/test_layers.py`); the lab imports the product freely. Its Hydra configs live
in the one tree, `conf/` (`compare.yaml`, `experiment/compare_optimizers.yaml`).
"""
