"""The diff of a replay against its stored trace, item by item."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from haki_context.core.history.replay_diff import ChangeKind, diff
from haki_context.core.models import Decision, ItemKind, ReasonCode
from haki_context.core.packet import TraceDecision


def decision(item: str, rank: int | None, score: float | None = 0.5, **kw: object) -> TraceDecision:
    base = TraceDecision(
        item_kind=ItemKind.FACT,
        item_id=item,
        chunk=None,
        decision=Decision.INCLUDED,
        reason_code=ReasonCode.TOP_SCORE,
        rank=rank,
        score=score,
        similarity=0.7,
        full_text=0.1,
        recency=0.9,
        distance=0.3,
        tokens=5,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def test_the_same_decisions_are_identical() -> None:
    stored = [decision("a", 1), decision("b", 2), replace(decision("e", 1), item_kind=ItemKind.EPISODE, chunk=0)]
    result = diff(stored, [replace(d) for d in stored])
    assert result.identical and result.changes == ()


def test_added_removed_moved_rescored_and_redecided_items_are_told_apart() -> None:
    stored = [decision("a", 1), decision("b", 2), decision("c", 3), decision("gone", 4)]
    replayed = [
        decision("b", 1),  # moved up
        decision("a", 2, score=0.4),  # moved down, score changed
        decision("c", 3, decision=Decision.BLOCKED, reason_code=ReasonCode.CONFLICT_OPEN),
        decision("new", 4),
    ]
    result = diff(stored, replayed)
    kinds = {c.item_id: c.kinds for c in result.changes}
    assert kinds == {
        "b": (ChangeKind.MOVED,),
        "a": (ChangeKind.MOVED, ChangeKind.SCORE_CHANGED),
        "c": (ChangeKind.DECISION_CHANGED,),
        "new": (ChangeKind.ADDED,),
        "gone": (ChangeKind.REMOVED,),
    }
    by_id = {c.item_id: c for c in result.changes}
    assert by_id["b"].rank_delta == -1 and by_id["a"].rank_delta == 1
    assert by_id["a"].components_changed == ("score",)
    assert (result.count(ChangeKind.MOVED), result.count(ChangeKind.ADDED)) == (2, 1)
    assert [c.item_id for c in result.served(before=True)] == ["c", "gone"]
    assert [c.item_id for c in result.served(before=False)] == ["new"]


def test_an_episode_chunk_is_matched_by_its_event_and_chunk() -> None:
    chunk0 = replace(decision("e", 1), item_kind=ItemKind.EPISODE, chunk=0)
    chunk1 = replace(decision("e", 2), item_kind=ItemKind.EPISODE, chunk=1)
    result = diff([chunk0], [chunk1])
    assert [(c.chunk, c.kinds) for c in result.changes] == [(1, (ChangeKind.ADDED,)), (0, (ChangeKind.REMOVED,))]


def test_float_noise_is_no_change_but_a_real_difference_is() -> None:
    assert diff([decision("a", 1, score=0.5)], [decision("a", 1, score=0.5 + 1e-15)]).identical
    assert not diff([decision("a", 1, score=0.5)], [decision("a", 1, score=0.5001)]).identical
    assert not diff([decision("a", 1, score=None)], [decision("a", 1, score=0.5)]).identical


def test_a_score_change_says_which_components_moved_and_by_how_much() -> None:
    stored = [decision("a", 1, score=0.701, recency=0.412), decision("b", 2)]
    replayed = [decision("a", 1, score=0.690, recency=0.398), decision("b", 2, score=0.5 + 2e-5)]
    by_id = {c.item_id: c for c in diff(stored, replayed).changes}
    assert by_id["a"].kinds == (ChangeKind.SCORE_CHANGED,)
    assert by_id["a"].why == "recency 0.412 -> 0.398 (-0.014); score 0.701 -> 0.690 (-0.011)"
    assert by_id["b"].why == "score 0.500 -> 0.500 (+2.0e-05)"  # too small for three places


def test_an_item_blocked_on_one_side_says_so_and_other_changes_say_nothing_of_scores() -> None:
    unscored: dict[str, Any] = {
        "score": None,
        "recency": None,
        "decision": Decision.BLOCKED,
        "reason_code": ReasonCode.CONFLICT_OPEN,
    }

    stored = [decision("a", 1, score=0.7), decision("b", 1), decision("c", 2), decision("d", None, **unscored)]
    replayed = [
        decision("a", None, **unscored),
        decision("c", 1),  # moved up, the same scores
        decision("b", 2, decision=Decision.EXCLUDED, reason_code=ReasonCode.OVER_BUDGET),
        decision("d", 3, score=0.25),
    ]
    by_id = {c.item_id: c for c in diff(stored, replayed).changes}
    assert by_id["a"].why == "score 0.700 -> none (blocked now, not scored)"
    assert by_id["c"].why is None and by_id["b"].why is None
    assert by_id["d"].why == "score none -> 0.250 (blocked then, not scored)"
