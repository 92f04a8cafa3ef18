"""The Mem0-style system's knobs record and stage table: what its `SPEC` states, without DSPy.

`Mem0Knobs` is the schema and single home of the defaults of `memory_system=mem0`; `STAGES` its
stages in pipeline order (`mem0.system` builds the system on them). Nothing here builds or runs anything.
"""

from __future__ import annotations

from dataclasses import dataclass

from memtrace_loop.memory_systems.stages import RESPOND_STAGE, StageRepair, StageSpec
from memtrace_loop.pipeline.core.config import require

STORE_STAGE = "store"


@dataclass(frozen=True)
class Mem0Knobs:
    """The non-prompt settings of the system (the tunable knobs of its non-LLM stages)."""

    top_k: int = 10  # memories retrieved for answering
    similar_k: int = 5  # existing memories shown to the update decision, per fact (construction)

    def __post_init__(self) -> None:
        require(self, top_k=(1, None), similar_k=(1, None))


STAGES: tuple[StageSpec, ...] = (
    StageSpec("extract", llm=True, repair=StageRepair.RERUN, construction=True),
    StageSpec("search_similar", llm=False, repair=StageRepair.NONE, construction=True),
    StageSpec("decide", llm=True, repair=StageRepair.RERUN, construction=True),
    StageSpec(STORE_STAGE, llm=False, repair=StageRepair.RERUN, construction=True),
    StageSpec("retrieve", llm=False, repair=StageRepair.WIDEN, knobs=("top_k",)),
    StageSpec(RESPOND_STAGE, llm=True, repair=StageRepair.ANSWER),
)
