"""Layer 3 (above memory_systems): judging and metrics, attribution, blame."""
