"""Packing under a token budget and the `rendered` text.

An item's tokens are `max(1, len(line) // 4)` of the line it adds to
`rendered`: so `usedTokens` is exactly what the agent pastes, and never more
than the budget.

Every section of a packet (facts, multi-hop facts, episodes) is packed the same
way, by `pack_section` (or two at once by `pack_merged`): items in rank order,
those past the recall gate set aside (BELOW_RELEVANCE_FLOOR), then what is said
already: a turn a served fact cites (CITED_BY_FACT) and, in one ranking, a fact
whose every source turn is served (SOURCES_SERVED), and an item whose text is
the same as one served above it (SAME_TEXT_SERVED: the same turn recorded twice),
so the tokens go to other memory; the rest taken while they fit (else
OVER_BUDGET). The verdicts are the decision ladder, in one place.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, NamedTuple, TypeVar

from .models import Decision, ReasonCode

T = TypeVar("T")


def tokens(text: str) -> int:
    """The tokens a line costs: a character count / 4, at least 1."""
    return max(1, len(text) // 4)


def fact_line(text: str, dated: datetime) -> str:
    """A fact as served: its text and the date it holds from."""
    return f"- {text} ({dated.date().isoformat()})"


def episode_line(excerpt: str, occurred_at: datetime) -> str:
    """An episode as served: when it happened, then its excerpt."""
    return f"- [{occurred_at.strftime('%Y-%m-%d %H:%M')}] {excerpt}"


def pack(items: Sequence[T], cost: Callable[[T], int], budget_left: int) -> tuple[list[T], int]:
    """Take items in order while they fit; one that does not fit is skipped and
    packing goes on (a smaller one may still fit). Returns (kept, budget left)."""
    kept: list[T] = []
    for item in items:
        c = cost(item)
        if c <= budget_left:
            kept.append(item)
            budget_left -= c
    return kept, budget_left


class Verdict(NamedTuple, Generic[T]):
    """What became of one ranked item of a section (a tuple: one is made per candidate)."""

    item: T
    decision: Decision
    reason: ReasonCode


@dataclass(frozen=True)
class Section(Generic[T]):
    """A packed section: the items kept, the budget left after them, and every item's verdict in rank order."""

    kept: list[T]
    left: int
    verdicts: list[Verdict[T]]


def pack_section(
    ranked: Sequence[T],
    cost: Callable[[T], int],
    budget_left: int,
    included: ReasonCode,
    gated: Callable[[T], bool] = lambda _: False,
    cited: Callable[[T], bool] = lambda _: False,
    *,
    text_of: Callable[[T], str] | None = None,
    said: Collection[str] = (),
) -> Section[T]:
    """Pack `ranked` (best first) into `budget_left`. An item past the recall gate is excluded
    whatever budget remains (BELOW_RELEVANCE_FLOOR); then one `cited` by a served fact is
    excluded CITED_BY_FACT; with `text_of`, one whose text is the same (`same_text`) as an item
    served before it, or as one of `said` (earlier sections' served texts, as `same_text` keys),
    is excluded SAME_TEXT_SERVED; one that fits is included for `included`; one that does not
    is excluded OVER_BUDGET."""
    served = set(said)
    verdicts: list[Verdict[T]] = []
    for item in ranked:
        if gated(item):
            verdicts.append(Verdict(item, Decision.EXCLUDED, ReasonCode.BELOW_RELEVANCE_FLOOR))
        elif cited(item):
            verdicts.append(Verdict(item, Decision.EXCLUDED, ReasonCode.CITED_BY_FACT))
        elif text_of is not None and same_text(text_of(item)) in served:
            verdicts.append(Verdict(item, Decision.EXCLUDED, ReasonCode.SAME_TEXT_SERVED))
        elif (c := cost(item)) <= budget_left:
            budget_left -= c
            verdicts.append(Verdict(item, Decision.INCLUDED, included))
            if text_of is not None:
                served.add(same_text(text_of(item)))
        else:
            verdicts.append(Verdict(item, Decision.EXCLUDED, ReasonCode.OVER_BUDGET))
    return Section([v.item for v in verdicts if v.decision is Decision.INCLUDED], budget_left, verdicts)


def same_text(text: str) -> str:
    """What makes two served texts the same: their words, whatever the spacing and the case."""
    return " ".join(text.split()).casefold()


def render(lines: Sequence[str]) -> str:
    """The packet's text: one line per served item."""
    return "\n".join(lines)


A = TypeVar("A")
B = TypeVar("B")


def pack_merged(
    first: Sequence[A],
    second: Sequence[B],
    *,
    score: Callable[[A | B], float],
    cost: Callable[[A | B], int],
    budget_left: int,
    included: ReasonCode,
    gated: Callable[[A | B], bool] = lambda _: False,
    cites: Callable[[A], Iterable[str]] = lambda _: (),
    cited_as: Callable[[B], str | None] = lambda _: None,
    skip_cited: bool = True,
    skip_restated: bool = False,
    text_of: Callable[[A | B], str] | None = None,
) -> tuple[Section[A], Section[B]]:
    """Pack two ranked sections (each best first) as one ranking by decreasing `score`, the
    first's item first at a tie: whichever kind answers better takes the budget. Each section's
    verdicts keep its own rank order; both sections' `left` is the budget left after both.

    What is said already is left out, whichever of the two ranks lower: with `skip_cited`, an
    item of the second section whose `cited_as` key is among the `cites` keys of the first
    section's items included before it is excluded CITED_BY_FACT; with `skip_restated`, an item
    of the first section whose `cites` keys are all `cited_as` keys of second-section items
    included before it is excluded SOURCES_SERVED; with `text_of`, an item whose text is the
    same (`same_text`) as an item of either section included before it is excluded
    SAME_TEXT_SERVED."""
    order = sorted([(-score(a), 0, i) for i, a in enumerate(first)] + [(-score(b), 1, i) for i, b in enumerate(second)])
    decided: list[dict[int, tuple[Decision, ReasonCode]]] = [{}, {}]
    served_cites: set[str] = set()  # what the first section's included items cite
    served_keys: set[str] = set()  # the keys of the second section's included items
    served_texts: set[str] = set()  # both sections' included items, as same_text keys
    for _, which, i in order:
        item: A | B = first[i] if which == 0 else second[i]
        if gated(item):
            decided[which][i] = (Decision.EXCLUDED, ReasonCode.BELOW_RELEVANCE_FLOOR)
        elif skip_cited and which == 1 and (key := cited_as(second[i])) is not None and key in served_cites:
            decided[which][i] = (Decision.EXCLUDED, ReasonCode.CITED_BY_FACT)
        elif skip_restated and which == 0 and (sources := set(cites(first[i]))) and sources <= served_keys:
            decided[which][i] = (Decision.EXCLUDED, ReasonCode.SOURCES_SERVED)
        elif text_of is not None and same_text(text_of(item)) in served_texts:
            decided[which][i] = (Decision.EXCLUDED, ReasonCode.SAME_TEXT_SERVED)
        elif (c := cost(item)) <= budget_left:
            budget_left -= c
            decided[which][i] = (Decision.INCLUDED, included)
            if text_of is not None:
                served_texts.add(same_text(text_of(item)))
            if which == 0:
                served_cites.update(cites(first[i]))
            elif (key := cited_as(second[i])) is not None:
                served_keys.add(key)
        else:
            decided[which][i] = (Decision.EXCLUDED, ReasonCode.OVER_BUDGET)
    return _section(first, decided[0], budget_left), _section(second, decided[1], budget_left)


def _section(ranked: Sequence[T], decided: dict[int, tuple[Decision, ReasonCode]], left: int) -> Section[T]:
    verdicts = [Verdict(item, *decided[i]) for i, item in enumerate(ranked)]
    return Section([v.item for v in verdicts if v.decision is Decision.INCLUDED], left, verdicts)
