"""The difference between two traces of one question: what a replay changed, item by item.

Items are matched by (kind, id, chunk). An item is ADDED when only the new trace considered it,
REMOVED when only the stored one did; an item both considered may have MOVED (another rank),
a SCORE_CHANGED (any score component: score, similarity, fullText, recency, distance) and a
DECISION_CHANGED (another decision or reason code). Two traces are identical when no item
changed, so a replay that reproduces a call gives an empty list.

A SCORE_CHANGED item says why: which components moved and by how much (`score_why`). In a
comparison with now, core/history/replay.py puts what changed in memory meanwhile in its place, where
the memory tells.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from ..models import Decision, ItemKind
from ..packet import TraceDecision

# Score components compared, by their TraceDecision attribute.
COMPONENTS = ("score", "similarity", "full_text", "recency", "distance")

# How a `why` names each component. The inputs come first and the hybrid score they make last,
# so the text reads from cause to effect.
_WHY_NAMES = {
    "similarity": "similarity",
    "full_text": "full text",
    "recency": "recency",
    "distance": "distance",
    "score": "score",
}

# Two components differ past this: the same computation on the same rows gives equal floats,
# and a real change of score is orders of magnitude larger.
TOLERANCE = 1e-9


class ChangeKind(str, enum.Enum):
    ADDED = "ADDED"
    REMOVED = "REMOVED"
    MOVED = "MOVED"
    SCORE_CHANGED = "SCORE_CHANGED"
    DECISION_CHANGED = "DECISION_CHANGED"


ItemKey = tuple[ItemKind, str, int | None]


@dataclass(frozen=True)
class ItemChange:
    """How one item's decision differs: `before` from the stored trace, `after` from the replay."""

    item_kind: ItemKind
    item_id: str
    chunk: int | None
    kinds: tuple[ChangeKind, ...]
    before: TraceDecision | None
    after: TraceDecision | None
    components_changed: tuple[str, ...]
    # Why it changed: what changed in memory meanwhile where that is known (compare with now),
    # else the components that moved (SCORE_CHANGED); None when neither says anything.
    why: str | None = None

    @property
    def key(self) -> ItemKey:
        return (self.item_kind, self.item_id, self.chunk)

    @property
    def rank_delta(self) -> int | None:
        """New rank less old rank (negative: moved up), when both ranked the item."""
        if self.before is None or self.after is None or self.before.rank is None or self.after.rank is None:
            return None
        return self.after.rank - self.before.rank


@dataclass(frozen=True)
class TraceDiff:
    """Every item whose decision differs, in the order of the replay's decisions, then the
    stored trace's for removed items."""

    changes: tuple[ItemChange, ...]

    @property
    def identical(self) -> bool:
        return not self.changes

    def count(self, kind: ChangeKind) -> int:
        """How many items changed in this way."""
        return sum(kind in c.kinds for c in self.changes)

    def served(self, before: bool) -> list[ItemChange]:
        """Changed items INCLUDED in the stored trace (before=True) or in the replay, not in the other."""
        out = []
        for c in self.changes:
            was = c.before is not None and c.before.decision is Decision.INCLUDED
            now = c.after is not None and c.after.decision is Decision.INCLUDED
            if (was and not now) if before else (now and not was):
                out.append(c)
        return out


def key_of(d: TraceDecision) -> ItemKey:
    return (d.item_kind, d.item_id, d.chunk)


def diff(stored: Iterable[TraceDecision], replayed: Iterable[TraceDecision]) -> TraceDiff:
    """The items whose decisions differ between a stored trace and its replay."""
    old = {key_of(d): d for d in stored}
    new = {key_of(d): d for d in replayed}
    changes = []
    for key, after in new.items():
        before = old.get(key)
        if before is None:
            changes.append(_change(key, (ChangeKind.ADDED,), before=None, after=after, components=()))
            continue
        kinds = []
        if before.rank != after.rank:
            kinds.append(ChangeKind.MOVED)
        changed = tuple(c for c in COMPONENTS if _differs(getattr(before, c), getattr(after, c)))
        if changed:
            kinds.append(ChangeKind.SCORE_CHANGED)
        if before.decision is not after.decision or before.reason_code is not after.reason_code:
            kinds.append(ChangeKind.DECISION_CHANGED)
        if kinds:
            why = score_why(before, after, changed) if changed else None
            changes.append(_change(key, tuple(kinds), before=before, after=after, components=changed, why=why))
    for key, before in old.items():
        if key not in new:
            changes.append(_change(key, (ChangeKind.REMOVED,), before=before, after=None, components=()))
    return TraceDiff(tuple(changes))


def _change(
    key: ItemKey,
    kinds: tuple[ChangeKind, ...],
    *,
    before: TraceDecision | None,
    after: TraceDecision | None,
    components: tuple[str, ...],
    why: str | None = None,
) -> ItemChange:
    return ItemChange(key[0], key[1], key[2], kinds, before, after, components, why)


def score_why(before: TraceDecision, after: TraceDecision, components: Iterable[str]) -> str:
    """Which of `components` moved between two decisions of one item, and by how much, the
    hybrid score last: "recency 0.412 -> 0.398 (-0.014); score 0.701 -> 0.690 (-0.011)". An item
    blocked on one side only is not scored there, and that is the whole change: "score 0.701 ->
    none (blocked now, not scored)"; its other components' moves are left out."""
    if (before.score is None) != (after.score is None):
        when = "now" if after.score is None else "then"
        return f"score {_value(before.score)} -> {_value(after.score)} (blocked {when}, not scored)"
    moved = set(components)
    return "; ".join(
        _moved(_WHY_NAMES[name], getattr(before, name), getattr(after, name)) for name in _WHY_NAMES if name in moved
    )


def _moved(name: str, old: float | None, new: float | None) -> str:
    if old is None or new is None:
        return f"{name} {_value(old)} -> {_value(new)}"
    delta = new - old
    # A change too small for three places is written as its difference in full, so it never
    # reads as "(+0.000)".
    shown = f"{delta:+.3f}" if abs(delta) >= 0.0005 else f"{delta:+.1e}"
    return f"{name} {old:.3f} -> {new:.3f} ({shown})"


def _value(value: float | None) -> str:
    return "none" if value is None else f"{value:.3f}"


def _differs(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return (a is None) != (b is None)
    return abs(a - b) > TOLERANCE * max(1.0, abs(a), abs(b))
