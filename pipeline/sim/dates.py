"""Dates in the simulated world: LoCoMo session stamps, human dates, relative expressions.

`locomo_stamp` writes LoCoMo's session format ("1:56 pm on 8 May, 2023"); `human` writes the format
the memory system shows the LM ("8 May 2023"); `find_dates` reads the date formats an answer or a
context line may use; `resolve_relative` turns "last Saturday" / "two days ago" into a date given the
session date. Pure functions, no randomness, no calendar beyond the Gregorian `datetime.date`.
"""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta

MONTHS: tuple[str, ...] = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
WEEKDAYS: tuple[str, ...] = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_NUMBER_WORDS = {"two": 2, "three": 3, "four": 4, "five": 5}

# Relative expressions the generator uses and the stand-in resolves (lowercase).
RELATIVE_EXPRESSIONS: tuple[str, ...] = (
    "yesterday",
    "two days ago",
    "three days ago",
    "four days ago",
    "last Friday",
    "last Saturday",
    "last Sunday",
)
RELATIVE_PATTERN = (
    r"(?i:yesterday|(?:two|three|four|five|\d) days ago|last (?:monday|tuesday|wednesday|thursday|"
    r"friday|saturday|sunday))"
)

_MONTH_ALT = "|".join(MONTHS) + "|" + "|".join(m[:3] for m in MONTHS)
_DAY_FIRST = re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?({_MONTH_ALT})\.?,?\s+(\d{{4}})\b", re.I)
_MONTH_FIRST = re.compile(rf"\b({_MONTH_ALT})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+(\d{{4}})\b", re.I)
_ISO = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_STAMP = re.compile(r"^\s*(\d{1,2}):(\d{2})\s*([ap]m)\s+on\s+(.+)$", re.I)


def _month_number(name: str) -> int:
    prefix = name[:3].lower()
    return next(i for i, month in enumerate(MONTHS, start=1) if month[:3].lower() == prefix)


def human(day: date) -> str:
    """date(2023, 5, 8) -> '8 May 2023'."""
    return f"{day.day} {MONTHS[day.month - 1]} {day.year}"


def locomo_stamp(moment: datetime) -> str:
    """datetime(2023, 5, 8, 13, 56) -> '1:56 pm on 8 May, 2023' (LoCoMo's session format)."""
    hour = moment.hour % 12 or 12
    half = "am" if moment.hour < 12 else "pm"
    return f"{hour}:{moment.minute:02d} {half} on {moment.day} {MONTHS[moment.month - 1]}, {moment.year}"


def find_dates(text: str) -> list[tuple[int, int, date]]:
    """All dates written in `text` as (start, end, date), in order; unreadable ones are skipped."""
    found: list[tuple[int, int, date]] = []
    for pattern, order in ((_DAY_FIRST, "dmy"), (_MONTH_FIRST, "mdy"), (_ISO, "ymd")):
        for match in pattern.finditer(text):
            a, b, c = match.groups()
            try:
                if order == "dmy":
                    day = date(int(c), _month_number(b), int(a))
                elif order == "mdy":
                    day = date(int(c), _month_number(a), int(b))
                else:
                    day = date(int(a), int(b), int(c))
            except (ValueError, StopIteration):
                continue
            if not any(s < match.end() and match.start() < e for s, e, _ in found):
                found.append((match.start(), match.end(), day))
    return sorted(found, key=lambda item: item[0])


def parse_date(text: str) -> date | None:
    """The first date written in `text` (also reads LoCoMo stamps), or None."""
    stamp = _STAMP.match(text)
    if stamp:
        text = stamp.group(4)
    dates = find_dates(text)
    return dates[0][2] if dates else None


def parse_stamp(stamp: str) -> datetime:
    """'1:56 pm on 8 May, 2023' -> datetime(2023, 5, 8, 13, 56)."""
    match = _STAMP.match(stamp)
    if not match:
        raise ValueError(f"not a LoCoMo session stamp: {stamp!r}")
    hour, minute, half, rest = match.groups()
    day = parse_date(rest)
    if day is None:
        raise ValueError(f"not a LoCoMo session stamp: {stamp!r}")
    hours = int(hour) % 12 + (12 if half.lower() == "pm" else 0)
    return datetime(day.year, day.month, day.day, hours, int(minute))


def resolve_relative(expression: str, session_day: date) -> date | None:
    """'last Saturday' on Monday 8 May 2023 -> 6 May 2023; None if not a relative expression."""
    words = expression.strip().lower().split()
    if words == ["yesterday"]:
        return session_day - timedelta(days=1)
    if len(words) == 3 and words[1:] == ["days", "ago"]:
        count = _NUMBER_WORDS.get(words[0]) or (int(words[0]) if words[0].isdigit() else 0)
        return session_day - timedelta(days=count) if count else None
    if len(words) == 2 and words[0] == "last" and words[1].capitalize() in WEEKDAYS:
        target = WEEKDAYS.index(words[1].capitalize())
        back = (session_day.weekday() - target) % 7 or 7
        return session_day - timedelta(days=back)
    return None


def date_token(day: date) -> str:
    """A single normalised token for a date, used when comparing answers."""
    return f"d{day.isoformat().replace('-', '')}"
