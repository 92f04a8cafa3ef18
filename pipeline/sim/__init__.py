"""The simulated world: a seeded synthetic LoCoMo-style dataset and a deterministic stand-in LM.

This is a *test world*, not a model. `world.generate_locomo` writes conversations with planted facts;
`stand_in.respond` answers DSPy-formatted stage requests with rule-based behaviour whose competence
depends on which rules (`rules.RULES`) the stage's instruction states; `engine.SimEngine` plugs the
stand-in into `dspy.LM(..., engine=...)`. Nothing here calls a network or a real model.
"""
