"""The simulated world's answer to the LLM attributor's step request (`JudgeOperation`): a verdict.

Rule-based and deterministic, and fair: it reads only the request text a real LLM would see. The
information to follow is the content words of the needed information that the question and gold answer
ask about (words compared by a crude stem), plus the gold answer's own
words. The operation *kept* it when its outputs still hold (nearly
all of) those words that its inputs held; inputs that held none of them cannot lose anything. The inputs
that count are, for a search, every unit it read; for any other step, the input lines that are the needed
information (their id is one it lists) when it shows any, else all of them: a word of another turn read
beside the needed one (the rest of a buffer) was not given to keep. For the
answer step it checks the answer instead: an answer without the gold's words from a context that held
(some of) the information is a ResponseError; a context that held none of it leaves the answer step
nothing to use. An operation whose inputs hold a word of the gold answer that its outputs do not hold
lost it, whatever else they kept: a reader shown the step and the gold answer sees the answer word go
missing. For a search the inputs are the units it read, including those of the store it did not return;
for any other step only the input lines that are the needed information count (an answer word in another
memory shown beside them was not given to keep), and the outputs must be shown whole (a view clipped for
display may hold the word).
The error type follows from the operation kind shown.
It does no I/O and never raises on odd text.
"""

from __future__ import annotations

import math
import re
from typing import Any

from memtrace_loop.pipeline.sim.dates import RELATIVE_PATTERN, find_dates
from memtrace_loop.pipeline.sim.judge import content_tokens
from memtrace_loop.pipeline.sim.protocol import StageRequest

_KIND = re.compile(r"\bkind (?P<kind>[a-z]+)\b")
_ERROR_BY_KIND = {
    "extraction": "ExtractionError",
    "update": "UpdateError",
    "deletion": "DeletionError",
    "retrieval": "RetrievalError",
    "response": "ResponseError",
    "other": "ExtractionError",
}
_ID_PREFIX = re.compile(r"^\s*\[[^\]]*\]\s*", re.M)
_RELATIVE = re.compile(RELATIVE_PATTERN)
_LABEL = re.compile(r"^(?!\(empty\)$)(?!none$)[A-Za-z]+(?: [A-Za-z]+){0,2}$")


def _dated(text: str) -> bool:
    return bool(find_dates(text) or _RELATIVE.search(text))


def _lost_time(shown_in: str, shown_out: str) -> str:
    """Why the outputs lost the time the inputs gave ("" when they did not): no date at all, or a relative
    date ("two days ago") left unresolved, i.e. the outputs only repeat the inputs' own date stamps."""
    if not _dated(shown_in):
        return ""
    if not _dated(shown_out):
        return "The question asks when; its inputs gave the time but its outputs hold no date."
    relative = _RELATIVE.search(shown_in)
    if relative and find_dates(shown_in) and not find_dates(shown_out):
        return (f"Its inputs give the time relative to the session date (\"{relative.group(0)}\"); its outputs "
                "keep the relative words but not the date they count from, so the date is lost.")
    if relative and not _RELATIVE.search(shown_out):
        stamps = {day for _, _, day in find_dates(shown_in)}
        written = {day for _, _, day in find_dates(shown_out)}
        if written and written <= stamps:
            return (f"Its inputs give the time relative to the session date (\"{relative.group(0)}\"), but its "
                    "outputs only repeat the session date: the relative date was not resolved.")
    return ""


_SAID = re.compile(r"^\[[^\]]*\]\s*(?:\[[^\]]*\]\s*)?[^:]{1,60}:\s*(?P<text>.+)$")


def _cut_turn(shown_in: str, shown_out: str) -> str:
    """A turn of the inputs that the outputs hold only a piece of (its start without its end, or its
    end without its start): a copy step cut it apart."""
    for line in shown_in.splitlines():
        said = _SAID.match(line.strip())
        if said is None:
            continue
        text = said.group("text").strip()
        words = text.split()
        if len(words) < 6 or text in shown_out or "..." in shown_out or "..." in text:
            continue  # whole, or clipped for display (a clipped view shows no cut)
        head, tail = " ".join(words[:3]), " ".join(words[-3:])
        if (head in shown_out) != (tail in shown_out):
            return f"Its outputs hold only a piece of the turn \"{text}\": the turn was cut apart."
    return ""


def _shown_whole(outputs: str) -> bool:
    """Outputs displayed without clipping: a word missing from a clipped view may be in the part not shown."""
    return "..." not in outputs and "more not shown" not in outputs


_LINE_ID = re.compile(r"^\s*\[(?P<id>[^\]]+)\]")


def _needed_lines(shown_in: str, needed: str) -> set[str]:
    """The words of the input lines that ARE the needed information (their id, e.g. `turn:D4:13@1`, is one
    the needed information lists): an answer word elsewhere in the inputs (another memory shown beside
    it) is not the information this step was given to keep."""
    words: set[str] = set()
    for line in shown_in.splitlines():
        found = _LINE_ID.match(line)
        if found and f"[{found.group('id')}]" in needed:
            words |= _tokens(line)
    return words


def _is_label(outputs: str) -> bool:
    """Outputs that are only short decision labels ("new episode", "sufficient"): no content to carry."""
    values = [_ID_PREFIX.sub("", line).strip() for line in outputs.splitlines() if line.strip()]
    return bool(values) and all(_LABEL.match(v) for v in values)


_SUFFIX = re.compile(r"(?:ing|ed|es|s)$")


def _stem(word: str) -> str:
    """A crude stem, so a word and its inflections compare ("volunteered" ~ "volunteer")."""
    return _SUFFIX.sub("", word) if len(word) > 5 and word.isalpha() else word


def _tokens(text: str) -> set[str]:
    return {_stem(w) for w in content_tokens(_ID_PREFIX.sub("", text))}


def _needed(request: StageRequest) -> set[str]:
    inputs = request.inputs
    gold = _tokens(inputs.get("gold_answer", ""))
    asked = _tokens(f"{inputs.get('question', '')} {inputs.get('gold_answer', '')}")
    return (_tokens(inputs.get("needed_information", "")) & asked) | gold


def _enough(held: set[str], found: set[str]) -> bool:
    need = len(held) if len(held) <= 3 else math.ceil(0.6 * len(held))
    return len(found & held) >= need


def judge_operation(request: StageRequest) -> dict[str, Any]:
    """The verdict on one operation: kept_information, error_type, reason (an answer is right only when it
    states every content word of the gold answer)."""
    inputs = request.inputs
    match = _KIND.search(inputs.get("operation", ""))
    kind = match.group("kind") if match else "other"
    error = _ERROR_BY_KIND.get(kind, "ExtractionError")
    target = _needed(request)
    shown_in = _tokens(inputs.get("operation_inputs", ""))
    shown_out = _tokens(inputs.get("operation_outputs", ""))
    gold = _tokens(inputs.get("gold_answer", ""))
    if kind == "response":
        if gold and gold <= shown_out:
            return {"kept_information": True, "error_type": "none", "reason": "The answer states the gold answer."}
        if not target & shown_in:
            reason = "Its context did not hold the needed information: the answer step had nothing to use."
            return {"kept_information": True, "error_type": "none", "reason": reason}
        return {
            "kept_information": False, "error_type": error,
            "reason": "The context was given to the answer step, yet the answer does not state "
                      f"\"{inputs.get('gold_answer', '')}\".",
        }
    if _is_label(inputs.get("operation_outputs", "")):
        reason = "It only decides a label; it carries no content."
        return {"kept_information": True, "error_type": "none", "reason": reason}
    # what the step was given to keep: for a search every unit it read; for any other step the input lines
    # that are the needed information (the rest of a buffer, a memory shown beside them, is not)
    given = shown_in if kind == "retrieval" else _needed_lines(
        inputs.get("operation_inputs", ""), inputs.get("needed_information", "")
    )
    held = target & (given or shown_in)  # a derived unit shows no needed line: all its inputs count
    cut = _cut_turn(inputs.get("operation_inputs", ""), inputs.get("operation_outputs", ""))
    if held and cut and inputs.get("operation_prompt", "").strip() in ("", "none"):
        return {"kept_information": False, "error_type": error, "reason": cut}
    when = inputs.get("question", "").strip().lower().startswith("when")
    if held and when:
        lost_time = _lost_time(inputs.get("operation_inputs", ""), inputs.get("operation_outputs", ""))
        if lost_time:
            return {"kept_information": False, "error_type": error, "reason": lost_time}
    if not held:
        return {"kept_information": True, "error_type": "none", "reason": "Its inputs did not hold the information."}
    whole = kind == "retrieval" or _shown_whole(inputs.get("operation_outputs", ""))  # a clipped view proves nothing
    lost_gold = (gold & given) - shown_out if whole else set()
    if lost_gold:
        what = "A unit it read holds" if kind == "retrieval" else "Its inputs hold"
        done = "what it returned does not" if kind == "retrieval" else "its outputs do not"
        return {
            "kept_information": False, "error_type": error,
            "reason": f"{what} \"{' '.join(sorted(lost_gold))}\" of the answer "
                      f"\"{inputs.get('gold_answer', '')}\", but {done}.",
        }
    if _enough(held, shown_out):
        return {"kept_information": True, "error_type": "none", "reason": "Its outputs still hold the information."}
    lost = " ".join(sorted(held - shown_out))
    return {
        "kept_information": False, "error_type": error,
        "reason": f"Its inputs held the needed information but its outputs lost \"{lost}\".",
    }


HANDLERS = {frozenset({"kept_information", "error_type", "reason"}): judge_operation}
