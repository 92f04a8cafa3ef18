"""The typed, immutable records that travel between modules.

Holds the dataset records (`Turn`, `Conversation`, `Question`), the prompt set that optimizers
produce and export writes (`PromptSet`), and the judged answer of one question (`CaseResult`).
It does not parse files (see `pipeline.data`) and holds no behaviour beyond small conveniences.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

CATEGORY_NAMES: Mapping[int, str] = MappingProxyType(
    {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
)


@dataclass(frozen=True, slots=True)
class Turn:
    """One utterance. `id` is the dataset's own dialog id (LoCoMo `D3:7`)."""

    id: str
    speaker: str
    text: str
    session: int
    time: str  # the session's date-time as an ISO-8601 string ("2023-05-08T13:56")


@dataclass(frozen=True, slots=True)
class Conversation:
    id: str
    speakers: tuple[str, ...]
    turns: tuple[Turn, ...]

    def turn_by_id(self) -> Mapping[str, Turn]:
        return {turn.id: turn for turn in self.turns}


@dataclass(frozen=True, slots=True)
class Question:
    """A question about one conversation; `evidence` lists the turn ids that hold the answer."""

    id: str
    conversation_id: str
    text: str
    gold: str
    category: int
    evidence: tuple[str, ...] = ()
    category_label: str = ""

    @property
    def category_name(self) -> str:
        return self.category_label or CATEGORY_NAMES.get(self.category, str(self.category))


@dataclass(frozen=True, slots=True)
class Dataset:
    """Conversations and their questions, in file order."""

    name: str
    conversations: tuple[Conversation, ...]
    questions: tuple[Question, ...]

    def questions_for(self, conversation_id: str) -> tuple[Question, ...]:
        return tuple(q for q in self.questions if q.conversation_id == conversation_id)

    def without_categories(self, excluded: Collection[int]) -> Dataset:
        """The dataset without the questions of the `excluded` categories, and without the conversations
        left with no question (nothing to answer there).

        >>> turn = Turn("D1:1", "A", "hi", 1, "2023-05-08T13:56")
        >>> data = Dataset("d", (Conversation("c1", ("A",), (turn,)), Conversation("c2", ("A",), (turn,))),
        ...                (Question("q1", "c1", "?", "a", 5), Question("q2", "c2", "?", "b", 1)))
        >>> [(c.id, [q.id for q in data.without_categories({5}).questions_for(c.id)])
        ...  for c in data.without_categories({5}).conversations]
        [('c2', ['q2'])]
        """
        if not excluded:
            return self
        return self._asking(tuple(q for q in self.questions if q.category not in excluded))

    def for_questions(self, question_ids: Iterable[str]) -> Dataset:
        """The part of the dataset holding `question_ids` (in file order) and only the conversations they are about."""
        wanted = set(question_ids)
        return self._asking(tuple(q for q in self.questions if q.id in wanted))

    def _asking(self, questions: tuple[Question, ...]) -> Dataset:
        asked = {q.conversation_id for q in questions}
        return Dataset(self.name, tuple(c for c in self.conversations if c.id in asked), questions)

    def subset(self, conversation_ids: tuple[str, ...], name: str | None = None) -> Dataset:
        keep = set(conversation_ids)
        return Dataset(
            name=name or self.name, conversations=tuple(c for c in self.conversations if c.id in keep),
            questions=tuple(q for q in self.questions if q.conversation_id in keep),
        )


@dataclass(frozen=True)
class PromptSet:
    """Stage name (the DSPy predictor path, e.g. `extract.predict`) -> instruction text."""

    instruction_by_stage: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "instruction_by_stage", MappingProxyType(dict(sorted(self.instruction_by_stage.items())))
        )

    def __iter__(self) -> Iterator[str]:
        return iter(self.instruction_by_stage)

    def __getitem__(self, stage: str) -> str:
        return self.instruction_by_stage[stage]

    def __len__(self) -> int:
        return len(self.instruction_by_stage)

    def stages(self) -> tuple[str, ...]:
        return tuple(self.instruction_by_stage)

    def replace(self, **instruction_by_stage: str) -> PromptSet:
        return PromptSet({**self.instruction_by_stage, **instruction_by_stage})

    def changed_stages(self, before: PromptSet) -> tuple[str, ...]:
        """The stages whose instruction differs from `before`'s (or that `before` lacks).

        >>> PromptSet({"a": "x", "b": "y"}).changed_stages(PromptSet({"a": "x", "b": "z"}))
        ('b',)
        """
        return tuple(s for s in self.stages() if self[s] != before.instruction_by_stage.get(s))

    def with_instruction(self, stage: str, instruction: str) -> PromptSet:
        return PromptSet({**self.instruction_by_stage, stage: instruction})

    def to_dict(self) -> dict[str, str]:
        return dict(self.instruction_by_stage)

    def digest(self, stages: tuple[str, ...] | None = None) -> str:
        """A short stable hash of the instructions of `stages` (all stages by default)."""
        chosen = {s: self.instruction_by_stage[s] for s in (stages or self.stages()) if s in self}
        return hashlib.sha256(json.dumps(chosen, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Scores:
    judge: float  # 1.0 when the judge said CORRECT, else 0.0
    f1: float
    bleu1: float


@dataclass(frozen=True, slots=True)
class CaseResult:
    """One answered and judged question. `error` is set when answering or judging failed."""

    question: Question
    prediction: str
    verdict: str  # "CORRECT", "WRONG", or "FAILED" when the judge's output could not be used
    scores: Scores
    error: str | None = None

    @property
    def correct(self) -> bool:
        return self.verdict == "CORRECT"
