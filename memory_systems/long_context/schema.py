"""The Long-Context system's knobs record and stage table: what its `SPEC` states, without DSPy.

`LongContextKnobs` is the schema and single home of the defaults of `memory_system=long_context`; `STAGES` its
stages in pipeline order (`long_context.system` builds the system on them). Nothing here builds or runs anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from memtrace_loop.memory_systems.stages import RESPOND_STAGE, StageRepair, StageSpec
from memtrace_loop.pipeline.core.config import require

APPEND_STAGE = "append"
TRIM_STAGE = "trim"
CONTEXT_STAGE = "context"


@dataclass(frozen=True)
class LongContextKnobs:
    """The non-prompt settings: the token window and the tokenizer that measures it."""

    window_tokens: int = 32768  # buffer size (tokens) past which the oldest turns are trimmed
    tokenizer: Literal["tiktoken", "approx"] = "tiktoken"  # tiktoken (cl100k_base, offline) or approx (chars / 4)

    def __post_init__(self) -> None:
        require(self, window_tokens=(1, None))


STAGES: tuple[StageSpec, ...] = (
    StageSpec(APPEND_STAGE, llm=False, repair=StageRepair.RERUN, construction=True),
    StageSpec(TRIM_STAGE, llm=False, repair=StageRepair.RESET_KNOBS, construction=True, knobs=("window_tokens",)),
    StageSpec(CONTEXT_STAGE, llm=False, repair=StageRepair.NONE),
    StageSpec(RESPOND_STAGE, llm=True, repair=StageRepair.ANSWER),
)
