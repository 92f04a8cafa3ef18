"""The stand-in LM's notice: only when a scored role (task, judge) is the stand-in on a benchmark dataset."""

from __future__ import annotations

from types import SimpleNamespace

from memtrace_loop.experiments.config import TEST_WORLD_NOTE_TAG, TEST_WORLD_TAG, Chosen, stand_in_notice, stand_in_tags


def plain(kind: str, task: str, judge: str, rewriter: str = "sim") -> SimpleNamespace:
    """The two parts of a validated app config the notice reads: its LM set and its dataset."""
    lm = SimpleNamespace(**{role: SimpleNamespace(backend=backend)
                            for role, backend in (("task", task), ("judge", judge), ("rewriter", rewriter))})
    return SimpleNamespace(dataset=Chosen(kind, None), lm=lm)


def test_the_stand_in_on_a_benchmark_dataset_is_announced() -> None:
    notice = stand_in_notice(plain("locomo", "sim", "sim"))
    assert notice is not None and notice.startswith("TEST WORLD") and "'locomo'" in notice and "task, judge" in notice
    only_judge = stand_in_notice(plain("longmemeval", "openai", "sim"))
    assert only_judge is not None and "role(s) judge)" in only_judge
    assert stand_in_tags(plain("locomo", "sim", "sim")) == {TEST_WORLD_TAG: "true", TEST_WORLD_NOTE_TAG: notice}


def test_no_notice_on_the_simulated_dataset_or_with_real_models() -> None:
    assert stand_in_notice(plain("sim", "sim", "sim")) is None
    assert stand_in_tags(plain("sim", "sim", "sim")) == {TEST_WORLD_TAG: "true"}
    assert stand_in_notice(plain("locomo", "openai", "openai")) is None  # the rewriter's backend does not score
    assert stand_in_tags(plain("locomo", "openai", "openai")) == {TEST_WORLD_TAG: "false"}
