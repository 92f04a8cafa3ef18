"""What one step of the LLM graph walk shows the LM: variable values clipped around the needed information.

`clip`, `focus_clip` (the window(s) holding the most needed words), `render_vars` (path lines first) and
`fit_step` (all fields under the step's bound). Pure text: no graph, no LM.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence

from memtrace_loop.pipeline.core.graph import Variable

CLIP_MARK = " ..."
VARIABLE_LIST_FIELDS = frozenset({"operation_inputs", "operation_outputs"})


def clip(text: str, limit: int) -> str:
    """`text` with whitespace folded, at most `limit` characters (a clipped text ends with " ...")."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    if limit <= len(CLIP_MARK):
        return text[: max(limit, 0)]
    return text[: limit - len(CLIP_MARK)] + CLIP_MARK


def focus_clip(text: str, limit: int, words: frozenset[str] = frozenset()) -> str:
    """Like `clip`, but a long text keeps the window(s) holding the most weight of `words` (the needed
    information's; a word frequent in the text weighs less), so clipping does not hide what the step is about."""
    text = " ".join(text.split())
    if len(text) <= limit or not words:
        return clip(text, limit)
    lower = text.lower()
    found = [(m.start(), m.group(0)) for m in re.finditer(r"[a-z0-9]+", lower) if m.group(0) in words]
    if not found:
        return clip(text, limit)
    width = max(limit - 2 * len(CLIP_MARK), 1)
    start, inside = _best_window(text, found, width)
    rest = [(p, w) for p, w in found if w not in inside]
    half = (limit - 3 * len(CLIP_MARK)) // 2
    if rest and half >= 60:
        first, covered = _best_window(text, found, half)
        second, _ = _best_window(text, [(p, w) for p, w in found if w not in covered], half)
        if abs(second - first) >= half:
            return clip(" ".join(_window(text, s, half) for s in sorted((first, second))), limit)
    return clip(_window(text, start, width), limit)


def _best_window(text: str, found: Sequence[tuple[int, str]], width: int) -> tuple[int, set[str]]:
    """The start of the `width`-character window holding the most weight of `found` (ties: the rarer anchor),
    and the words inside it."""
    weight_by_word = {w: 1.0 / n for w, n in Counter(w for _, w in found).items()}
    best_start, best_score, best_inside = 0, (-1.0, -1.0), set()
    for position, anchor in found:
        start = max(0, min(position - min(40, width // 4), len(text) - width))
        inside = {w for p, w in found if start <= p and p + len(w) <= start + width}
        score = (round(sum(weight_by_word[w] for w in inside), 9), weight_by_word[anchor])
        if score > best_score:
            best_start, best_score, best_inside = start, score, inside
    return best_start, best_inside


def _window(text: str, start: int, width: int) -> str:
    head = CLIP_MARK.strip() + " " if start > 0 else ""
    tail = CLIP_MARK if start + width < len(text) else ""
    return head + text[start : start + width] + tail


def same_word(word: str, other: str) -> bool:
    """Equal, or one (of five letters or more) is the other plus at most three ("volunteer", "volunteered")."""
    short, long = sorted((word, other), key=len)
    return word == other or (len(short) >= 5 and long.startswith(short) and len(long) - len(short) <= 3)


def share(room: int, count: int, limit: int) -> int:
    """Characters per variable value when `count` values share `room` (at least 60, at most `limit`)."""
    return max(60, min(limit, room // max(count, 1) - 24))


def render_vars(
    variables: Sequence[Variable], max_value_chars: int, words: frozenset[str], room: int = 0,
    lead: tuple[int, int] = (0, 0),
) -> str:
    """One line per variable (`[id] value`, the value focused on `words`)."""
    if not variables:
        return "none"
    lines = [
        f"[{v.id}] {focus_clip(v.value, lead[1] if i < lead[0] else max_value_chars, words) or '(empty)'}"
        for i, v in enumerate(variables)
    ]
    if room <= 0 or sum(len(line) + 1 for line in lines) <= room:
        return "\n".join(lines)
    kept: list[str] = []
    used = 0
    for line in lines:
        if kept and used + len(line) + 40 > room:
            break
        kept.append(line)
        used += len(line) + 1
    return "\n".join([*kept, f"(+{len(lines) - len(kept)} more not shown)"])


def _clip_lines(text: str, limit: int) -> str:
    """A variable list clipped to `limit` characters, each line to its share (at least 60), the overflow dropped."""
    lines = text.split("\n")
    total = sum(len(line) for line in lines)
    if total + len(lines) - 1 <= limit:
        return text
    kept: list[str] = []
    used = 0
    for line in lines:
        piece = clip(line, max(60, (len(line) * limit) // total))
        if used + len(piece) + (1 if kept else 0) > limit:
            break
        used += len(piece) + (1 if kept else 0)
        kept.append(piece)
    return "\n".join(kept) if kept else clip(lines[0], limit)


def fit_step(fields: Mapping[str, str], max_chars: int, fixed: Sequence[str] = ()) -> dict[str, str]:
    """Clip the field values to at most `max_chars` together: `fixed` fields to a tenth each, the others proportionally.
    """
    out = {name: clip(fields[name], max_chars // 10) for name in fixed}
    rest = {name: value for name, value in fields.items() if name not in out}
    room = max_chars - sum(len(v) for v in out.values())
    total = sum(len(v) for v in rest.values())
    for name, value in rest.items():
        allowance = len(value) if total <= room else (len(value) * room) // total
        if len(value) <= allowance:
            out[name] = value
        elif name in VARIABLE_LIST_FIELDS:
            out[name] = _clip_lines(value, allowance)
        else:
            out[name] = clip(value, allowance)
    return out
