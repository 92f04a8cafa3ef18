"""The EverMemOS-style system's knobs record and stage table: what its `SPEC` states, without DSPy.

`EverMemOSKnobs` is the schema and single home of the defaults of `memory_system=evermemos`; `STAGES` its
stages in pipeline order (`evermemos.system` builds the system on them). Nothing here builds or runs anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from memtrace_loop.memory_systems.stages import RESPOND_STAGE, StageRepair, StageSpec
from memtrace_loop.pipeline.core.config import require

LIMIT_STAGE = "episode_limits"
RETRIEVE_STAGE = "retrieve"


@dataclass(frozen=True)
class EverMemOSKnobs:
    """The non-prompt settings (reference defaults; see conf/memory_system/evermemos.yaml)."""

    top_k: int = 10  # episodes in the answer context
    bm25_top: int = 50  # BM25 candidates per query
    emb_top: int = 50  # dense (embedding) candidates per query
    rrf_k: int = 60  # reciprocal rank fusion constant: score = sum of 1 / (rrf_k + rank)
    multi_query: bool = True  # a second retrieval round with expanded queries when the evidence is insufficient
    max_expanded_queries: int = 3  # expanded queries used in the second round
    max_episode_turns: int = 20  # hard limit: an episode closes at this many turns (construction)
    max_episode_tokens: int = 2048  # hard limit: an episode closes before a turn takes it past this (construction)
    tokenizer: Literal["tiktoken", "approx"] = "tiktoken"  # tiktoken (cl100k_base, offline) or approx (chars / 4)

    def __post_init__(self) -> None:
        positive = ("top_k", "bm25_top", "emb_top", "max_episode_turns", "max_episode_tokens")
        require(self, **{name: (1, None) for name in positive})
        require(self, rrf_k=(0, None), max_expanded_queries=(0, None))
        if self.multi_query and self.max_expanded_queries < 1:  # the second round would search nothing new
            raise ValueError("max_expanded_queries must be >= 1 while multi_query is true (or set multi_query=false)")


STAGES: tuple[StageSpec, ...] = (
    StageSpec("detect_boundary", llm=True, repair=StageRepair.RERUN, construction=True),
    StageSpec(LIMIT_STAGE, llm=False, repair=StageRepair.NONE, construction=True),
    StageSpec("write_events", llm=True, repair=StageRepair.RERUN, construction=True),
    StageSpec("write_episode", llm=True, repair=StageRepair.RERUN, construction=True),
    StageSpec("check_sufficiency", llm=True, repair=StageRepair.STEER),
    StageSpec("expand_queries", llm=True, repair=StageRepair.STEER),
    StageSpec(RETRIEVE_STAGE, llm=False, repair=StageRepair.WIDEN, knobs=("top_k",)),
    StageSpec(RESPOND_STAGE, llm=True, repair=StageRepair.ANSWER),
)
