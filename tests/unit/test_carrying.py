"""What it means for a text to carry information (pipeline/analysis/attribution/carrying.py): the worked
examples, token normalization, coverage, and the text cues attribution reads."""

from __future__ import annotations

import doctest

import pytest
from memtrace_loop.pipeline.analysis.attribution import carrying
from memtrace_loop.pipeline.analysis.attribution.carrying import (
    content_tokens,
    coverage_needed,
    is_abstention,
    is_date_like,
    people_in,
    relative_date,
    turn_text,
)


def test_the_worked_examples_in_the_module_doc_hold():
    failures, tried = doctest.testmod(carrying)
    assert tried >= 5 and failures == 0


def test_content_tokens_normalize_dates_plurals_and_stopwords():
    assert content_tokens("June 7th, 2022") == content_tokens("7 Jun 2022") == {"7", "june", "2022"}
    assert content_tokens("on 2022-06-07") == content_tokens("7 June 2022")
    assert content_tokens("She has two dogs") == {"two", "dog"}
    assert content_tokens("the glass") == {"glass"}  # a double s is no plural
    assert content_tokens("the and of") == frozenset()


@pytest.mark.parametrize(("size", "needed"), [(0, 0), (1, 1), (3, 3), (4, 3), (5, 3), (10, 6)])
def test_a_short_target_is_needed_whole_and_a_long_one_at_sixty_percent(size, needed):
    assert coverage_needed(frozenset(str(i) for i in range(size))) == needed


def test_a_turns_prefix_is_dropped_and_only_the_prefix():
    assert turn_text("[7 May 2023] Nora: My aunt: Marco.") == "My aunt: Marco."
    assert turn_text("no prefix: here") == "no prefix: here"


def test_the_text_cues():
    assert is_date_like("7 May 2023") and is_date_like("in 2021") and not is_date_like("a teacher")
    assert relative_date("We moved there two weeks ago, I think") == "two weeks ago"
    assert relative_date("We moved in May") is None
    assert is_abstention("that is not mentioned in the conversation") and not is_abstention("Tucson")
    assert people_in("Kofi's dog met my sister Lena in May. June was fun.") == ["Kofi", "Lena"]
