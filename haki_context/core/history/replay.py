"""`replay(traceId, with:, persist:, compareWithNow:)`: a stored context call run again, and how it differs.

A replay asks the stored call's question (its subject, query and budget) of the memory as it
stood at the call's own instant (its `asOf`, else its `createdAt`), under the settings record
the call ran under, and compares the new decisions with the stored ones (core/history/replay_diff.py).
Without overrides it reproduces the stored decisions, except where the stored call used a
scope's approximate index and the exact scan a replay makes finds other rows (db/as_of.py).
Overrides change the budget, the ranking profile, any decision setting, or take the server's
current settings. `compareWithNow` asks the same question of the memory as it stands now: the
diff then says what changed since, and each changed item says why when the memory tells
(superseded or retracted since, recorded after the call, held in a conflict set now).

A replay writes no trace unless `persist` (then the new trace records its instant and settings
like any other). A trace unknown, pruned by retention or deleted by forgetSubject is NOT_FOUND.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import asyncpg

from ...db import events as db_events
from ...db import facts as db_facts
from ...settings import RankingProfile
from ..context import assembler, served, settings_records
from ..context.settings_records import SettingsRecord
from ..errors import NotFound
from ..limits import try_parse_id
from ..models import Decision, Event, Fact, FactEndReason, ItemKind, ReasonCode
from ..packet import ContextTrace
from ..records import events_or_none, facts_or_none
from ..serving.runtime import Runtime
from .replay_diff import ItemChange, TraceDiff, diff
from .traces import decisions_by_trace, traces_by_id


@dataclass(frozen=True)
class ReplayOverrides:
    """What a replay changes of the stored call; nothing by default."""

    budget: int | None = None
    profile: RankingProfile | None = None
    settings: Mapping[str, Any] | None = None  # decision settings by name
    current_settings: bool = False  # the server's settings instead of the recorded ones


@dataclass(frozen=True)
class Replay:
    original: ContextTrace  # with its decisions
    assembly: assembler.Assembly  # the new packet, its trace, and its write (done at once unless persisted)
    as_of: datetime  # the instant the replay answered for
    compared_with_now: bool
    persisted: bool
    settings: SettingsRecord  # what the replay ran under
    notes: tuple[str, ...]
    diff: TraceDiff


EXACT_PLAN_NOTE = "replayed by the exact plan: every row of the scope scanned and ranked exactly, no approximate index"


async def replay(
    rt: Runtime,
    project_id: str,
    trace_id: str,
    overrides: ReplayOverrides | None = None,
    *,
    persist: bool = False,
    compare_with_now: bool = False,
) -> Replay:
    """Run a stored call again (see the module's doc); NOT_FOUND when the trace is not stored."""
    wanted = overrides or ReplayOverrides()
    original = await _stored(rt, project_id, trace_id)
    notes = [EXACT_PLAN_NOTE]

    recorded = None
    if original.settings_id is not None:
        recorded = await settings_records.by_id(rt, project_id, original.settings_id)
    if wanted.current_settings:
        notes.append("replayed under the server's current settings, not the recorded ones")
        recorded = None
    elif recorded is None:
        notes.append(
            "the call has no settings record (made before they were kept): replayed under the server's current settings"
        )
    settings = settings_records.settings_with(rt.settings, recorded, profile=wanted.profile, overrides=wanted.settings)
    if recorded is not None:
        then, now = recorded.embedder, {"name": rt.embedder.name, "space": rt.embedder.space}
        if then != now:
            notes.append(
                f"the call embedded with {then.get('name')} ({then.get('space')}), this server with"
                f" {now['name']} ({now['space']}): similarities differ"
            )
    runtime = rt if settings == rt.settings else replace(rt, settings=settings)
    record = settings_records.record_of(settings, rt.embedder)
    async with rt.pool.acquire() as conn:  # so that the packet's trace names a stored record, persisted or not
        await settings_records.ensure_written(conn, project_id, record)

    called_for = original.as_of or original.created_at
    instant = datetime.now(UTC) if compare_with_now else called_for
    budget = wanted.budget if wanted.budget is not None else original.budget_tokens
    # Read before the replay runs: a persisted replay's trace is sent as it ends, and a failure
    # after that would leave a trace of a replay that answered nothing.
    stored_settings = await served.call_settings(rt, project_id, original.settings_id)
    assembly = await assembler.start_assembly(
        runtime, project_id, original.subject_id, original.query, budget, as_of=instant, persist=persist
    )
    # Both sides numbered in the order each call packed its items in (TraceDecision.overallRank).
    changes = diff(
        served.with_overall_ranks(original.decisions or (), stored_settings.packing),
        served.with_overall_ranks(assembly.packet.trace.decisions or (), settings.packing),
    )
    if compare_with_now and changes.changes:
        changes = await _explained(rt, project_id, changes, called_for)
    return Replay(
        original=original,
        assembly=assembly,
        as_of=instant,
        compared_with_now=compare_with_now,
        persisted=persist,
        settings=record,
        notes=tuple(notes),
        diff=changes,
    )


async def _stored(rt: Runtime, project_id: str, trace_id: str) -> ContextTrace:
    missing = NotFound(
        f"no trace {trace_id}: unknown, pruned by trace retention, or its subject was forgotten",
        field="traceId",
    )
    if try_parse_id(trace_id) is None:
        raise missing
    (trace,) = await traces_by_id(rt, project_id, [trace_id])
    if trace is None:
        raise missing
    (decisions,) = await decisions_by_trace(rt, project_id, [trace.id])
    return replace(trace, decisions=tuple(decisions))


async def _explained(rt: Runtime, project_id: str, changes: TraceDiff, then: datetime) -> TraceDiff:
    """Each changed item with what happened to it in memory since `then`, where the memory tells."""
    fact_ids = sorted({c.item_id for c in changes.changes if c.item_kind is ItemKind.FACT})
    event_ids = sorted({c.item_id for c in changes.changes if c.item_kind is ItemKind.EPISODE})

    async def read(conn: asyncpg.Connection) -> tuple[list[Any], list[Any]]:
        return await db_facts.get_facts(conn, project_id, fact_ids), await db_events.get_events(
            conn, project_id, event_ids
        )

    fact_rows, event_rows = await rt.reads.run(read)
    facts = dict(zip(fact_ids, facts_or_none(fact_rows)))
    events = dict(zip(event_ids, events_or_none(event_rows)))
    out = []
    for c in changes.changes:
        if c.item_kind is ItemKind.FACT:
            why = _fact_why(c, facts.get(c.item_id), then)
        else:
            why = _event_why(c, events.get(c.item_id), then)
        # What changed in memory explains the change where it tells; else the diff's own why (the
        # components that moved, replay_diff.score_why), which recency drifting with time alone
        # would otherwise add to every item of a comparison with now.
        out.append(replace(c, why=why or c.why))
    return TraceDiff(tuple(out))


def _fact_why(c: ItemChange, fact: Fact | None, then: datetime) -> str | None:
    if fact is None:
        return "no longer stored"
    if fact.recorded_at > then:
        return f"recorded at {fact.recorded_at.isoformat()}, after the call"
    if fact.end_reason is not None and (fact.ended_at is None or fact.ended_at > then):
        when = "at an unknown instant" if fact.ended_at is None else f"at {fact.ended_at.isoformat()}"
        if fact.end_reason is FactEndReason.SUPERSEDED:
            return f"superseded {when} by fact {fact.superseded_by}"
        return f"retracted {when}"
    after, before = c.after, c.before
    if after is not None and after.reason_code is ReasonCode.CONFLICT_OPEN:
        return (
            f"held in the open conflict set {fact.open_conflict_id}"
            if fact.open_conflict_id
            else "held in a conflict set"
        )
    if before is not None and before.reason_code is ReasonCode.CONFLICT_OPEN and after is not None:
        return "its conflict set was resolved or dismissed since"
    restated_before = before is not None and before.reason_code is ReasonCode.SOURCES_SERVED
    if after is not None and after.reason_code is ReasonCode.SOURCES_SERVED and not restated_before:
        return "left out: the turns it cites are served now"
    if restated_before and after is not None and after.reason_code is not ReasonCode.SOURCES_SERVED:
        return "no longer left out for the turns it cites"
    if (repeated := _repeat_why(c)) is not None:
        return repeated
    if after is not None and after.reason_code is ReasonCode.VOLATILITY_EXPIRED:
        return "past its volatility horizon now"
    if fact.valid_to is not None and fact.valid_to <= datetime.now(UTC) and after is None:
        return f"no longer valid since {fact.valid_to.isoformat()}"
    if after is not None and before is not None and after.decision is not before.decision:
        return (
            "ranked differently against what the memory holds now" if after.decision is not Decision.BLOCKED else None
        )
    return None


def _event_why(c: ItemChange, event: Event | None, then: datetime) -> str | None:
    if event is None:
        return "no longer stored"
    if event.recorded_at > then:
        return f"recorded at {event.recorded_at.isoformat()}, after the call"
    after, before = c.after, c.before
    cited_before = before is not None and before.reason_code is ReasonCode.CITED_BY_FACT
    if after is not None and after.reason_code is ReasonCode.CITED_BY_FACT and not cited_before:
        return "left out: a fact served now cites this turn"
    if cited_before and after is not None and after.reason_code is not ReasonCode.CITED_BY_FACT:
        return "no longer left out for a fact citing it"
    return _repeat_why(c)


def _repeat_why(c: ItemChange) -> str | None:
    """Why an item's repeat verdict (SAME_TEXT_SERVED) changed, when it did."""
    before = c.before is not None and c.before.reason_code is ReasonCode.SAME_TEXT_SERVED
    after = c.after is not None and c.after.reason_code is ReasonCode.SAME_TEXT_SERVED
    if after and not before:
        return "left out: the same text is served above it now"
    if before and c.after is not None and not after:
        return "no longer left out: its text is not served above it now"
    return None
