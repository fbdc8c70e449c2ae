"""Packing under a token budget and the `rendered` text.

An item's tokens are what the line it adds to `rendered` costs in the call's
tokenizer (core/context/token_counts.py): so `usedTokens` counts what the agent
pastes, and is never more than the budget.

Every section of a packet (facts, multi-hop facts, episodes) is packed the same
way, by `pack_section` (or two at once by `pack_merged`), each verdict given by
one decision ladder (`_Ladder.decide`): items in rank order,
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

from ..models import Decision, ReasonCode

T = TypeVar("T")


def fact_date(valid_from: datetime | None, recorded_at: datetime) -> datetime:
    """The date a fact is served and scored with: when it holds from, else when it was recorded."""
    return valid_from or recorded_at


def fact_line(text: str, dated: datetime) -> str:
    """A fact as served: its text and the date it holds from."""
    return f"- {text} ({dated.date().isoformat()})"


def episode_line(excerpt: str, occurred_at: datetime) -> str:
    """An episode as served: when it happened, then its excerpt."""
    return f"- [{occurred_at.strftime('%Y-%m-%d %H:%M')}] {excerpt}"


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


def same_text(text: str) -> str:
    """What makes two served texts the same: their words, whatever the spacing and the case."""
    return " ".join(text.split()).casefold()


class _Ladder(Generic[T]):
    """The decision ladder, the one place each verdict is given: items come in the order they
    are packed, and what is served so far is remembered for the rules of what is said already."""

    def __init__(
        self,
        *,
        cost: Callable[[T], int],
        budget_left: int,
        included: ReasonCode,
        gated: Callable[[T], bool],
        text_of: Callable[[T], str] | None,
        said: Collection[str] = (),
    ) -> None:
        self.cost, self.left, self.included, self.gated, self.text_of = cost, budget_left, included, gated, text_of
        self.served_texts = set(said)  # as same_text keys

    def decide(self, item: T, *, cited: bool = False, restated: bool = False) -> tuple[Decision, ReasonCode]:
        """An item past the recall gate is excluded whatever budget remains (BELOW_RELEVANCE_FLOOR);
        then what is said already: a turn a served fact cites (`cited`: CITED_BY_FACT), a fact whose
        source turns are served (`restated`: SOURCES_SERVED), a text served above it (with `text_of`:
        SAME_TEXT_SERVED); one that fits is included, one that does not is excluded OVER_BUDGET."""
        if self.gated(item):
            return Decision.EXCLUDED, ReasonCode.BELOW_RELEVANCE_FLOOR
        if cited:
            return Decision.EXCLUDED, ReasonCode.CITED_BY_FACT
        if restated:
            return Decision.EXCLUDED, ReasonCode.SOURCES_SERVED
        key = same_text(self.text_of(item)) if self.text_of is not None else None
        if key is not None and key in self.served_texts:
            return Decision.EXCLUDED, ReasonCode.SAME_TEXT_SERVED
        c = self.cost(item)
        if c > self.left:
            return Decision.EXCLUDED, ReasonCode.OVER_BUDGET
        self.left -= c
        if key is not None:
            self.served_texts.add(key)
        return Decision.INCLUDED, self.included


def pack_section(
    ranked: Sequence[T],
    *,
    cost: Callable[[T], int],
    budget_left: int,
    included: ReasonCode,
    gated: Callable[[T], bool] = lambda _: False,
    cited: Callable[[T], bool] = lambda _: False,
    text_of: Callable[[T], str] | None = None,
    said: Collection[str] = (),
) -> Section[T]:
    """Pack `ranked` (best first) into `budget_left`, each item's verdict given by the decision
    ladder (`_Ladder.decide`): `cited` marks a turn a served fact cites; with `text_of`, a text
    the same as an item served before it, or as one of `said` (earlier sections' served texts,
    as `same_text` keys), is left out."""
    ladder = _Ladder(cost=cost, budget_left=budget_left, included=included, gated=gated, text_of=text_of, said=said)
    verdicts = [Verdict(item, *ladder.decide(item, cited=cited(item))) for item in ranked]
    return Section([v.item for v in verdicts if v.decision is Decision.INCLUDED], ladder.left, verdicts)


def render(lines: Sequence[str]) -> str:
    """The packet's text: one line per served item."""
    return "\n".join(lines)


def render_packet(facts: Sequence[str], hops: Sequence[str], episodes: Sequence[str]) -> str:
    """The packet's `rendered`: the facts served by score, then the multi-hop facts, then the
    episodes, one line each, whatever order the budget was spent in."""
    return render([*facts, *hops, *episodes])


def merged_order(first: Sequence[float], second: Sequence[float]) -> list[tuple[int, int]]:
    """The order one ranking takes two sections in, given each one's scores best first: by
    decreasing score, the first's item first at a tie, each section in its own order; as
    (section 0 or 1, index) pairs."""
    keys = [(-s, 0, i) for i, s in enumerate(first)] + [(-s, 1, i) for i, s in enumerate(second)]
    return [(which, i) for _, which, i in sorted(keys)]


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

    Each verdict is the decision ladder's (`_Ladder.decide`), whichever of the two kinds ranks
    lower: with `skip_cited`, an item of the second section whose `cited_as` key is among the
    `cites` keys of the first section's items included before it is cited; with
    `skip_restated`, an item of the first section whose `cites` keys are all `cited_as` keys of
    second-section items included before it is restated; with `text_of`, a text the same as an
    item of either section included before it is left out."""
    ladder: _Ladder[A | B] = _Ladder(
        cost=cost, budget_left=budget_left, included=included, gated=gated, text_of=text_of
    )
    order = merged_order([score(a) for a in first], [score(b) for b in second])
    decided: list[dict[int, tuple[Decision, ReasonCode]]] = [{}, {}]
    served_cites: set[str] = set()  # what the first section's included items cite
    served_keys: set[str] = set()  # the keys of the second section's included items
    for which, i in order:
        if which == 0:
            sources = set(cites(first[i]))
            verdict = ladder.decide(first[i], restated=skip_restated and bool(sources) and sources <= served_keys)
            if verdict[0] is Decision.INCLUDED:
                served_cites.update(sources)
        else:
            key = cited_as(second[i])
            verdict = ladder.decide(second[i], cited=skip_cited and key is not None and key in served_cites)
            if verdict[0] is Decision.INCLUDED and key is not None:
                served_keys.add(key)
        decided[which][i] = verdict
    return _section(first, decided[0], ladder.left), _section(second, decided[1], ladder.left)


def _section(ranked: Sequence[T], decided: dict[int, tuple[Decision, ReasonCode]], left: int) -> Section[T]:
    verdicts = [Verdict(item, *decided[i]) for i, item in enumerate(ranked)]
    return Section([v.item for v in verdicts if v.decision is Decision.INCLUDED], left, verdicts)
