"""The simulated world as an LM backend (`lm.<role>.backend: sim`): its record and engines, as `SPEC`.

Its record is `SimLMConfig`; its engine is the deterministic stand-in (`pipeline.sim.engine`),
offline. It lives in the sim world, which only the registries reach: the LM-backend registry
(`pipeline.backends.registry`) names this module by string. The engine module is imported when engines
are first built, so listing the backends (the config store does) does not load the stand-in's rules.
It does not retry or guard calls (`build_lm` wraps every backend's engines).
"""

from __future__ import annotations

from memtrace_loop.pipeline.backends.lm import SimLMConfig, lm_model_name
from memtrace_loop.pipeline.backends.spec import BackendSpec, Engines

__all__ = ["SPEC", "sim_engines"]


def sim_engines(config: SimLMConfig) -> Engines:
    """The deterministic stand-in engine. Offline."""
    from memtrace_loop.pipeline.sim.engine import SimEngine

    return SimEngine(paraphrase=config.paraphrase), lm_model_name(config)


SPEC = BackendSpec(SimLMConfig, sim_engines)
