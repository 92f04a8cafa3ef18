"""`memory_system=mem0ai`'s knobs record, stage names and stage table: what its `SPEC` states, without DSPy.

`Mem0aiKnobs` is the schema and single home of the defaults of `memory_system=mem0ai`; the names of
mem0's two LLM stages (`EXTRACTION`, `UPDATE`, as mem0's prompt hooks call them) and of its non-LLM
ones; `STAGES` in pipeline order (`mem0ai.system` builds the system on them). Nothing here imports
mem0 or DSPy, builds or runs anything.
"""

from __future__ import annotations

from dataclasses import dataclass

from memtrace_loop.memory_systems.stages import RESPOND_STAGE, StageRepair, StageSpec
from memtrace_loop.pipeline.core.config import require

EXTRACTION = "fact_extraction"
UPDATE = "update_memory"
STORE_STAGE = "store"
SEARCH_STAGE = "search_similar"

@dataclass(frozen=True)
class Mem0aiKnobs:
    """The knobs mem0 exposes to us: `top_k`, the `limit` of `memory.search` at question time. (mem0
    1.0.x's per-fact similarity search has a hard-coded limit of 5: not a knob.)"""

    top_k: int = 10  # memories retrieved for answering

    def __post_init__(self) -> None:
        require(self, top_k=(1, None))

STAGES: tuple[StageSpec, ...] = (
    StageSpec(EXTRACTION, llm=True, repair=StageRepair.RERUN, construction=True),
    StageSpec(SEARCH_STAGE, llm=False, repair=StageRepair.NONE, construction=True),
    StageSpec(UPDATE, llm=True, repair=StageRepair.RERUN, construction=True),
    StageSpec(STORE_STAGE, llm=False, repair=StageRepair.RERUN, construction=True),
    StageSpec("retrieve", llm=False, repair=StageRepair.WIDEN, knobs=("top_k",)),
    StageSpec(RESPOND_STAGE, llm=True, repair=StageRepair.ANSWER),
)
