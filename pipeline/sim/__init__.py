"""The simulated world: a seeded synthetic LoCoMo-style dataset and a deterministic stand-in LM.

This is a *test world*, not a model. Modules:

- `rules` - the rule catalog: competences a stage shows only when its instruction states them;
- `world` (+ `episodes`, `vocab`, `dates`) - `generate_locomo`, conversations with planted facts and
  questions that record the rules they need and the error they are expected to fail with;
- `grammar` - the one template table the generator writes with and the stand-in reads with;
- `stages` - the one stage table (per stage: output fields, handler, rules; pipeline order), plus the
  rows memory systems add from their folders (`system_stages`, through the memory-system registry);
- `stand_in` (+ `protocol`, `handlers`, `episode_handlers`, `judge`) - `respond(messages)`, the
  rule-driven stand-in LM answering DSPy adapter requests, dispatched by output field names;
- `test_world` - the world as a `TestWorld` (perfect instruction and rules per stage), reached through
  `pipeline.backends.registry.backend_test_world`;
- `engine` - `SimEngine`, the dspy custom engine: `dspy.LM("sim/stand-in", engine=SimEngine())`.

Nothing here calls a network or a real model, and importing the package imports nothing heavy.
"""
