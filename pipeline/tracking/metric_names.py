"""THE names of every metric the apps log to MLflow, grouped with `/` (the UI groups charts by the first part).

Writers and readers build names with these functions and constants, never literals of their own:
quality `<scope>/<metric>` and `<scope>/cat/<category>/<metric>` (scopes `eval`, `train`, `dev`,
`dev/final`, `test/start`, `test/final`), `<scope>/traced/<count>`, `<scope>/failures/<count>`; LM
calls `lm_calls/<role>/made|cached|reused|failed|reused_share`, `lm_calls/made|cached|reused|saved|
failed|failed_share|budget_spent`; `lm_tokens/...`, `lm_retries/...`; `attribution/...`, `loop/...`,
`candidates/...`, `prompt_chars/start|final`, `time/elapsed_s`, `gain/<optimizer>/<system>/...`.
`legacy_name` gives the flat name runs logged before this scheme (readers fall back to it). It logs
nothing and computes no value.
"""

from __future__ import annotations

import re

SEP = "/"

# scopes of one evaluation
EVAL = "eval"  # `memtrace run`
TRAIN = "train"
DEV = "dev"
DEV_FINAL = f"dev{SEP}final"
TEST_START = f"test{SEP}start"
TEST_FINAL = f"test{SEP}final"

# quality metrics of one evaluation (overall and per category)
JUDGE_ACCURACY = "judge_accuracy"
QUALITY_METRICS = ("judge_accuracy", "judge_ci_low", "judge_ci_high", "f1", "bleu1", "n", "judge_failed")
FAILED_JUDGE_CALLS = "failed_judge_calls"  # overall only
TRACED_COUNTS = ("lm_calls", "lm_cached_calls", "prompt_tokens", "completion_tokens", "failed_operations")

_UNSAFE = re.compile(r"[^0-9A-Za-z_]+")


def name_part(text: str) -> str:
    """A category, role or cause as one segment of a metric name: letters, digits and `_` only."""
    return _UNSAFE.sub("_", text).strip("_").lower()


def join(*parts: str) -> str:
    return SEP.join(parts)


def quality(scope: str, metric: str, category: str | None = None) -> str:
    """`<scope>/<metric>`, or `<scope>/cat/<category>/<metric>` for one category."""
    if category is None:
        return join(scope, metric)
    return join(scope, "cat", name_part(category), metric)


def traced(scope: str, count: str) -> str:
    """`<scope>/traced/<count>`: a count of the evaluation's traced graph (`TRACED_COUNTS`)."""
    return join(scope, "traced", count)


# LM layer
LM_CALLS = "lm_calls"
LM_TOKENS = "lm_tokens"
LM_RETRIES = "lm_retries"
MADE, CACHED, FAILED, SAVED = "made", "cached", "failed", "saved"
REUSED, REUSED_SHARE = "reused", "reused_share"  # answered from the run's store of replies (not sent again)
CALLS_MADE = join(LM_CALLS, MADE)
CALLS_CACHED = join(LM_CALLS, CACHED)
CALLS_REUSED = join(LM_CALLS, REUSED)
CALLS_REUSED_SHARE = join(LM_CALLS, REUSED_SHARE)
CALLS_SAVED = join(LM_CALLS, SAVED)
BUDGET_SPENT = join(LM_CALLS, "budget_spent")  # cumulative, step = iteration
TOKENS_PROMPT = join(LM_TOKENS, "prompt")
TOKENS_COMPLETION = join(LM_TOKENS, "completion")
TOKENS_MADE = join(LM_TOKENS, MADE)
RETRIES_TOTAL = join(LM_RETRIES, "total")
CALLS_FAILED = join(LM_CALLS, FAILED)  # finally failed (after retries), every role
CALLS_FAILED_SHARE = join(LM_CALLS, "failed_share")  # of the logical calls made


def failures(scope: str, count: str) -> str:
    """`<scope>/failures/<count>`: what failed operations did to one evaluation (scored, touched,
    touched_wrong, judge_accuracy_untouched|low|high: `pipeline.loop.failure_impact`)."""
    return join(scope, "failures", count)


def role_calls(role: str, kind: str) -> str:
    """`lm_calls/<role>/<kind>` (kind: made, cached, reused, failed, reused_share)."""
    return join(LM_CALLS, name_part(role), kind)


def role_retries(role: str, cause: str | None = None) -> str:
    """`lm_retries/<role>`, or `lm_retries/<role>/<cause>`."""
    return join(LM_RETRIES, name_part(role)) if cause is None else join(LM_RETRIES, name_part(role), name_part(cause))


def attribution(metric: str) -> str:
    """`attribution/<metric>` (count, verified_share, refuted_share, unverifiable_share, joint_share, lm_calls,
    replay_calls)."""
    return join("attribution", metric)


# the loop
def blame(stage: str, statistic: str) -> str:
    """`blame/<stage>/share|count`: a run's attributed failures per blamed stage."""
    return join("blame", name_part(stage), statistic)


DIAGNOSIS_OK = join("diagnosis", "ok")

CANDIDATES = join("loop", "candidates")
ACCEPTED = join("loop", "accepted")
ATTRIBUTED_FAILURES = join("loop", "attributed_failures")
ITERATIONS = join("loop", "iterations")
CALLS_TO_90 = join(LM_CALLS, "to_90pct_gain")  # budget calls spent when dev first reached 90% of its final gain


def candidate_cost(count: str) -> str:
    """`candidates/<count>`: what candidates cost (`pipeline.loop.costs`), on the parent run at the end
    (candidates, screened, screened_out, accepted, screen_calls, full_calls, calls_per_candidate,
    calls_per_accepted, audited, audit_would_pass)."""
    return join("candidates", count)


PROMPT_CHARS_START = join("prompt_chars", "start")
PROMPT_CHARS_FINAL = join("prompt_chars", "final")
ELAPSED_S = join("time", "elapsed_s")


def gain(optimizer: str, system: str, statistic: str = "mean") -> str:
    """`gain/<optimizer>/<system>/<statistic>` (mean, ci_low, ci_high) of a comparison run."""
    return join("gain", name_part(optimizer), name_part(system), statistic)


# the flat names runs logged before this scheme (readers fall back to them)
LEGACY_BY_NAME = {
    BUDGET_SPENT: "lm_calls.budget_spent",
    CALLS_MADE: "lm_calls.made",
    CALLS_CACHED: "lm_calls.cached",
    CALLS_SAVED: "lm_calls.saved",
    TOKENS_PROMPT: "lm_tokens.prompt",
    TOKENS_COMPLETION: "lm_tokens.completion",
    TOKENS_MADE: "lm_tokens_made",
    PROMPT_CHARS_FINAL: "final_prompt_chars",
    PROMPT_CHARS_START: "start_prompt_chars",
    ELAPSED_S: "elapsed_s",
    ITERATIONS: "iterations",
    quality(DEV, JUDGE_ACCURACY): "dev_judge_accuracy",
    quality(TRAIN, JUDGE_ACCURACY): "train_judge_accuracy",
    quality(DEV_FINAL, JUDGE_ACCURACY): "dev_final_judge_accuracy",
    quality(TEST_START, JUDGE_ACCURACY): "test_start_judge_accuracy",
    quality(TEST_FINAL, JUDGE_ACCURACY): "test_final_judge_accuracy",
    quality(EVAL, JUDGE_ACCURACY): "judge_accuracy",
    quality(EVAL, "f1"): "f1",
    quality(EVAL, "bleu1"): "bleu1",
}


def legacy_name(name: str) -> str | None:
    """The flat name an older run logged `name` under (None when there is none)."""
    return LEGACY_BY_NAME.get(name)
