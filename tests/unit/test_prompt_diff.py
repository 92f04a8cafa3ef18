"""Prompt diffs (MLflow's `candidates/*.diff.txt`, `final_prompts.diff.txt`, report.html's rewrites) are
line-wise: an instruction is compared a sentence per line, wrapped, so an edited sentence is one changed
line among unchanged context, not the whole instruction removed and added again."""

from __future__ import annotations

from memtrace_loop.memory_systems.signatures import AnswerQuestion
from memtrace_loop.pipeline.core.records import PromptSet
from memtrace_loop.pipeline.tracking.loop_observer import DIFF_WIDTH, instruction_lines, prompt_diff

BEFORE = (
    "Answer the question from the retrieved memories only. Dates are relative to the session date. "
    "When the memories do not hold the answer, say you do not know. Keep the answer to a short phrase."
)


def _changes(diff: str) -> tuple[list[str], list[str], list[str]]:
    body = [line for line in diff.splitlines() if not line.startswith(("---", "+++", "@@"))]
    return ([line[1:] for line in body if line.startswith("-")], [line[1:] for line in body if line.startswith("+")],
            [line[1:] for line in body if line.startswith(" ")])


def test_an_edited_sentence_is_one_changed_line_among_unchanged_context():
    old, new = "Dates are relative to the session date.", "Resolve relative dates against the session date."
    after = BEFORE.replace(old, new)
    diff = prompt_diff(PromptSet({"answer.predict": BEFORE}), PromptSet({"answer.predict": after}))
    removed, added, context = _changes(diff)
    assert removed == ["Dates are relative to the session date."]
    assert added == ["Resolve relative dates against the session date."]
    assert "Answer the question from the retrieved memories only." in context
    assert "answer.predict (current)" in diff and "answer.predict (candidate)" in diff


def test_an_appended_sentence_only_adds_a_line():
    after = BEFORE + " Never answer with a full sentence."
    removed, added, _ = _changes(prompt_diff(PromptSet({"s": BEFORE}), PromptSet({"s": after})))
    assert removed == [] and added == ["Never answer with a full sentence."]


def test_long_sentences_are_wrapped_without_losing_or_splitting_words():
    text = AnswerQuestion.instructions + "\n\n" + " ".join(["word"] * 80) + "."
    lines = instruction_lines(text)
    assert all(len(line) <= DIFF_WIDTH for line in lines if " " in line.strip())
    assert "" in lines  # the blank line is kept
    assert " ".join(" ".join(lines).split()) == " ".join(text.split())  # every word, in order


def test_unchanged_stages_and_equal_sets_give_no_diff():
    prompts = PromptSet({"a": BEFORE, "b": "Extract facts."})
    assert prompt_diff(prompts, prompts) == ""
    diff = prompt_diff(prompts, prompts.replace(b="Extract facts. Keep dates."))
    assert "a (current)" not in diff and "+Keep dates." in diff
