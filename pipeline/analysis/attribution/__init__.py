"""Failure attribution: which operation (and stage prompt or knob) made a case fail, and was it really it.

One module per method behind the `Attributor` protocol (`protocol`): `lineage` (follows the evidence
through the graph, no LLM), `llm` (an LM walks the graph one operation at a time), `replay` (repairs
the blamed operation's output, re-runs what lies downstream and marks the attribution verified).
"""
