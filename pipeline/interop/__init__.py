"""Beside the layers: trace formats of other tools (ExecNetwork) and MemTraceBench labels."""
