"""LM calls counted at the LM layer: made and cache-served apart, per role, exact under threads, shared by
copies of a counted LM, and DSPy's own usage tracking still working underneath."""

from __future__ import annotations

import copy
from concurrent.futures import ThreadPoolExecutor

import dspy
import pytest
from dspy.clients.cache import Cache
from memtrace_loop.pipeline.analysis.judge import JudgeAnswer
from memtrace_loop.pipeline.backends.call_count import BUDGET_ROLES, CallLedger, CallTally, RoleCalls
from memtrace_loop.pipeline.backends.lm import LMConfig, LMSet
from memtrace_loop.pipeline.backends.registry import build_lm


@pytest.fixture
def fresh_cache(tmp_path):
    """DSPy's response cache in a fresh directory for this test (restored afterwards)."""
    saved = dspy.cache
    dspy.cache = Cache(enable_disk_cache=True, enable_memory_cache=True, disk_cache_dir=str(tmp_path / "cache"))
    yield dspy.cache
    dspy.cache = saved


def cached_lms(ledger: CallLedger, reuse_calls: bool = False) -> LMSet:
    """One cached sim LM for every role; without reply reuse, so a repeat is what DSPy's cache makes of it."""
    lm = build_lm(LMConfig(backend="sim", model="stand-in", cache=True, reuse_calls=reuse_calls))
    return ledger.counted(LMSet(lm, lm, lm, lm))


def judge(lm: dspy.BaseLM) -> dspy.Predict:
    predictor = dspy.Predict(JudgeAnswer)
    predictor.set_lm(lm)
    return predictor


def ask(predictor: dspy.Predict, i: int) -> str:
    return predictor(question=f"Where does person {i} live?", gold_answer="Rome", generated_answer="Rome").label


def test_a_warm_cache_rerun_counts_zero_made_and_every_call_cached(fresh_cache):
    ledger = CallLedger()
    predictor = judge(cached_lms(ledger).judge)
    for i in range(5):
        ask(predictor, i)
    cold = ledger.tally()
    assert cold.role("judge") == RoleCalls(made=5, cached=0, failed=0, prompt_tokens=cold.role("judge").prompt_tokens,
                                           completion_tokens=cold.role("judge").completion_tokens)
    assert cold.role("judge").prompt_tokens > 0 and cold.role("judge").completion_tokens > 0
    for i in range(5):
        ask(predictor, i)
    warm = ledger.tally() - cold
    assert warm.role("judge") == RoleCalls(made=0, cached=5)  # no tokens either: nothing reached the backend
    assert all(n >= 0 for calls in ledger.tally().by_role.values() for n in vars(calls).values())
    assert ledger.tally().role("task") == RoleCalls()  # another role saw nothing


def test_with_reply_reuse_a_repeat_in_the_same_run_is_reused_even_when_the_cache_serves_it(fresh_cache):
    ledger = CallLedger()
    predictor = judge(cached_lms(ledger, reuse_calls=True).judge)
    for _ in range(2):
        for i in range(5):
            ask(predictor, i)
    calls = ledger.tally().role("judge")
    assert (calls.made, calls.cached, calls.reused) == (5, 0, 5)  # the budget (made + cached) as with the cache off


def test_roles_are_counted_apart_even_when_one_lm_object_serves_them_all(fresh_cache):
    ledger = CallLedger()
    lms = cached_lms(ledger)
    ask(judge(lms.task), 1)
    ask(judge(lms.rewriter), 2)
    ask(judge(lms.rewriter), 3)
    tally = ledger.tally()
    assert (tally.made(["task"]), tally.made(["rewriter"]), tally.made(["judge"])) == (1, 2, 0)
    assert tally.made(BUDGET_ROLES) == 3 and tally.made() == 3


def test_counts_are_exact_under_threads_and_shared_by_copies_of_a_counted_lm(fresh_cache):
    ledger = CallLedger()
    lm = cached_lms(ledger).task
    copied = [lm.copy(), copy.copy(lm), judge(lm).deepcopy().lm]
    predictors = [judge(x) for x in (lm, *copied)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda i: ask(predictors[i % len(predictors)], i), range(40)))
    with ThreadPoolExecutor(max_workers=8) as pool:  # the same 40 requests again: all from the cache
        list(pool.map(lambda i: ask(predictors[i % len(predictors)], i), range(40)))
    assert ledger.tally().role("task") == RoleCalls(
        made=40, cached=40, prompt_tokens=ledger.tally().role("task").prompt_tokens,
        completion_tokens=ledger.tally().role("task").completion_tokens,
    )


def test_dspy_usage_tracking_still_sees_the_tokens_of_made_calls(fresh_cache):
    ledger = CallLedger()
    predictor = judge(cached_lms(ledger).judge)
    with dspy.context(track_usage=True):
        first = predictor(question="Q?", gold_answer="A", generated_answer="A")
        again = predictor(question="Q?", gold_answer="A", generated_answer="A")
    usage = next(iter(first.get_lm_usage().values()))
    assert usage["prompt_tokens"] == ledger.tally().role("judge").prompt_tokens > 0
    assert again.get_lm_usage() == {}  # served by the cache: DSPy bills nothing, as before


class _Down:
    """An engine whose backend is unreachable."""

    def complete(self, request):
        raise ConnectionError("backend down")


def test_a_call_that_fails_is_made_and_failed_not_cached(fresh_cache):
    ledger = CallLedger()
    broken = dspy.LM("sim/broken", engine=_Down(), num_retries=0, cache=True)
    counted = ledger.count("attributor", broken)
    with pytest.raises(Exception, match="backend down"):
        counted("hello")
    assert ledger.tally().role("attributor") == RoleCalls(made=1, cached=0, failed=1)
    assert broken.callbacks == []  # the original LM was left alone


def test_tallies_subtract_per_role():
    later = CallTally({"task": RoleCalls(made=5, cached=2), "judge": RoleCalls(made=1)})
    earlier = CallTally({"task": RoleCalls(made=3)})
    assert (later - earlier).by_role == {"task": RoleCalls(made=2, cached=2), "judge": RoleCalls(made=1)}


def test_the_worked_examples_in_the_module_docs_hold():
    """`_SeenRequests` forgets like the reply store (least recently asked first), so it stays bounded."""
    import doctest

    from memtrace_loop.pipeline.backends import call_count

    failures, tried = doctest.testmod(call_count)
    assert tried >= 2 and failures == 0
