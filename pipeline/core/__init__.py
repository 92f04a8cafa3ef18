"""Layer 0: records, the execution graph, its JSON, tracing and the graph naming conventions."""
