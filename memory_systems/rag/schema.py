"""The RAG system's knobs record and stage table: what its `SPEC` states, without DSPy.

`RagKnobs` is the schema and single home of the defaults of `memory_system=rag`; `STAGES` its
stages in pipeline order (`rag.system` builds the system on them). Nothing here builds or runs anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from memtrace_loop.memory_systems.stages import RESPOND_STAGE, StageRepair, StageSpec
from memtrace_loop.pipeline.core.config import require

CHUNK_STAGE = "chunk"
RETRIEVE_STAGE = "retrieve"


@dataclass(frozen=True)
class RagKnobs:
    """The non-prompt settings of the system."""

    max_chunk_tokens: int = 1200  # upper bound of a chunk, in tokens (construction)
    overlap_tokens: int = 0  # tokens of the previous chunk's last turns repeated at the start of the next
    top_k: int = 10  # chunks retrieved for answering
    tokenizer: Literal["tiktoken", "approx"] = "tiktoken"  # tiktoken (cl100k_base, offline) or approx (chars / 4)

    def __post_init__(self) -> None:
        require(self, max_chunk_tokens=(16, None))
        if not 0 <= self.overlap_tokens < self.max_chunk_tokens:
            raise ValueError(f"overlap_tokens must be in [0, max_chunk_tokens={self.max_chunk_tokens}), "
                             f"got {self.overlap_tokens}")
        require(self, top_k=(1, None))


STAGES: tuple[StageSpec, ...] = (
    StageSpec(
        CHUNK_STAGE, llm=False, repair=StageRepair.RESET_KNOBS, construction=True,
        knobs=("max_chunk_tokens", "overlap_tokens"),
    ),
    StageSpec(RETRIEVE_STAGE, llm=False, repair=StageRepair.WIDEN, knobs=("top_k",)),
    StageSpec(RESPOND_STAGE, llm=True, repair=StageRepair.ANSWER),
)
