"""Dates a query names, and which items they point at.

"What did Maria donate in December 2023?" or "... on October 13, 2023?" asks
about memory of that time: items dated then are likelier answers, so the
assembler may add a bonus to their score (HAKI_DATE_BOOST). A query names a
date as `<Month> [<day>][, <year>]` or `<day> <Month>[, <year>]`; a month alone
matches that month of any year, a day matches within `DAY_SLACK_DAYS`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

MONTHS = {
    name: i + 1
    for i, name in enumerate(
        (
            "january",
            "february",
            "march",
            "april",
            "may",
            "june",
            "july",
            "august",
            "september",
            "october",
            "november",
            "december",
        )
    )
}
DAY_SLACK_DAYS = 3  # a conversation about a day is often recorded a day or two later

_MONTH = "(" + "|".join(m.capitalize() for m in MONTHS) + ")"
_YEAR = r"(?:,?\s+((?:19|20)\d\d))?"
_MONTH_FIRST = re.compile(rf"\b{_MONTH}(?:\s+(\d{{1,2}})(?:st|nd|rd|th)?)?{_YEAR}\b")
_DAY_FIRST = re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?{_MONTH}{_YEAR}\b")


@dataclass(frozen=True)
class DateCue:
    """A date a query names: a month, with its year and day when given."""

    month: int
    year: int | None = None
    day: int | None = None

    def matches(self, at: datetime) -> bool:
        """True when `at` falls in the named time (a named day: within DAY_SLACK_DAYS of it)."""
        if self.year is not None and self.day is not None:
            try:
                named = at.replace(year=self.year, month=self.month, day=self.day)
            except ValueError:
                return False
            return abs((at - named).total_seconds()) <= DAY_SLACK_DAYS * 86400.0
        return at.month == self.month and (self.year is None or at.year == self.year)


def date_cue(query: str) -> DateCue | None:
    """The first date `query` names (capitalised month names only: "may" is also a verb), else None."""
    best: tuple[int, DateCue] | None = None
    for m in _MONTH_FIRST.finditer(query):
        cue = _cue(m.group(1), m.group(2), m.group(3))
        if cue is not None and (best is None or m.start() < best[0]):
            best = (m.start(), cue)
    for m in _DAY_FIRST.finditer(query):
        cue = _cue(m.group(2), m.group(1), m.group(3))
        if cue is not None and (best is None or m.start() <= best[0]):
            best = (m.start(), cue)
    return best[1] if best else None


def _cue(month: str, day: str | None, year: str | None) -> DateCue | None:
    d = int(day) if day else None
    if d is not None and not 1 <= d <= 31:
        return None
    return DateCue(MONTHS[month.lower()], int(year) if year else None, d)
