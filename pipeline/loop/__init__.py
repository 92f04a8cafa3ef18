"""Layer 5 (above optimizers): running a system over a dataset, the memory cache, the loop."""
