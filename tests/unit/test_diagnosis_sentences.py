"""Whole sentences in the diagnosis: a long question, answer or reason is shortened at a sentence or word
boundary (an ellipsis, inside quotes, marks the cut), so the written analysis (the console box, the top of
report.html, diagnosis.md) never ends a sentence on a cut word such as "too small for t ."."""

from __future__ import annotations

import re

import pytest
from memtrace_loop.pipeline.analysis.attribution.records import Attribution, ErrorType, Tunable
from memtrace_loop.pipeline.analysis.diagnosis import ELLIPSIS, clip, diagnose
from memtrace_loop.pipeline.core.records import CaseResult, Question, Scores

from tests.support.sim import sim_lm

_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'_:-]*")
_CUT_BEFORE_PERIOD = re.compile(r" [a-z]{1,2} \.| \.(?:\s|$)")

# reasons of the shapes the lineage attributor writes, with memory units as long as LoCoMo's
_UNIT = ("Caroline said she went to the LGBTQ support group on the seventh of May and found it powerful, "
         "moving and a place where she could talk about her own transition story with other people")
_REASONS = {
    ErrorType.RETRIEVAL: (
        f"m:17 \"{_UNIT}\" holds the answer (\"7 May 2023\") and was in the store when locomo:c0:q12 was asked, "
        "but search_memories (op:88, k=5) did not retrieve it into v:204. The search ranked it just below the "
        "cut (about rank 6 with k=5): top_k is too small for this question."
    ),
    ErrorType.RESPONSE: (
        f"the context v:204 given to answer (op:90) held the answer (\"7 May 2023\") and {_UNIT}, yet it answered "
        "v:205 \"She went to a support group\" (gold \"7 May 2023\"). The question asks when; the answer left out "
        "the date that the memory states."
    ),
    ErrorType.EXTRACTION: (
        f"the date the answer needs (\"7 May 2023\"); the turn gives it as a relative date (\"yesterday\") that "
        f"had to be resolved against the session date never reached any memory unit: nothing derived from "
        f"D1:3 \"{_UNIT}\" carries it."
    ),
}


def _attribution(i: int, error: ErrorType, reason: str, question: str = "When did Caroline go to the group?",
                 answer: str = "She went to a support group") -> Attribution:
    case = CaseResult(Question(f"locomo:c0:q{i:02d}", "c0", question, "7 May 2023", 2, ("D1:3",)), answer, "WRONG",
                      Scores(0.0, 0.0, 0.0))
    return Attribution(case, f"op:{i}", "search_memories", "retrieve", error, reason, 0.9, "lineage", Tunable.KNOBS)


def _words(text: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(text)}


def _cut_words(text: str, source: set[str]) -> list[str]:
    """The words of `text` that are not whole words of `source`, except a word an ellipsis follows."""
    return [m.group(0) for m in _WORD.finditer(text)
            if m.group(0).lower() not in source and not text[m.end():].lstrip().startswith(ELLIPSIS.strip())]


@pytest.mark.parametrize("error", list(_REASONS), ids=lambda e: e.value)
def test_the_analysis_never_ends_a_sentence_on_a_cut_word(error: ErrorType):
    long_question = "When did Caroline go to the LGBTQ support group that she " + " and then ".join(
        ["talked about with Melanie over coffee"] * 12) + "?"
    attributions = [_attribution(1, error, _REASONS[error], question=long_question, answer=f"{_UNIT}. {_UNIT}"),
                    _attribution(2, error, _REASONS[error])]
    diagnosis = diagnose(attributions, sim_lm())
    assert diagnosis.ok, diagnosis.error
    # the same failures with short texts: the analysis's own wording, to tell it from the quoted texts
    plain = diagnose([_attribution(i, error, "lost", question="q", answer="a") for i in (1, 2)], sim_lm())
    source = _words(plain.markdown()) | _words(" ".join(
        f"{a.case.question.text} {a.case.prediction} {a.reason} {a.question_id}" for a in attributions))
    for shown in (diagnosis.headline(), diagnosis.markdown()):
        assert not _CUT_BEFORE_PERIOD.search(shown), shown
        assert _cut_words(shown, source) == [], shown
    assert diagnosis.analysis.endswith(".") and "locomo:c0:q01" in diagnosis.analysis
    outside_quotes = re.sub(r'"[^"]*"|\u201c[^\u201d]*\u201d', "", diagnosis.analysis)
    assert ELLIPSIS.strip() not in outside_quotes and "..." not in outside_quotes  # an ellipsis only inside quotes


@pytest.mark.parametrize("text", [*_REASONS.values(), "x" * 50 + " " + _UNIT],
                         ids=[*(e.value for e in _REASONS), "long_word"])
def test_a_clipped_text_keeps_whole_sentences_or_whole_words(text: str):
    source = _words(text)
    for limit in range(30, len(text) + 5, 7):
        shown = clip(text, limit)
        assert len(shown) <= limit
        assert _cut_words(shown, source) == [], (limit, shown)
        if shown != text:
            assert shown.endswith((".", ELLIPSIS, ELLIPSIS + '"')), (limit, shown)
            assert shown.count('"') % 2 == 0, (limit, shown)  # a cut inside a quotation closes it
    assert clip(text, len(text)) == text
    first_two = _REASONS[ErrorType.RETRIEVAL].split(". The search")[0] + "."
    assert clip(_REASONS[ErrorType.RETRIEVAL], len(first_two) + 10) == first_two  # whole sentences when they fit
