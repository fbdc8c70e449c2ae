"""Writing facts: assertFact's three modes and four outcomes, and retractFact.

Transitions follow the table of docs/design.md "The write path". Writes to one
(project, subject) are serialised by a transaction-scoped advisory lock (so
those to one predicate are too); a partial unique index over ACTIVE values is
the backstop.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg
import orjson

from ...db import conflicts as db_conflicts
from ...db import events as db_events
from ...db import facts as db_facts
from ...db import scope_indexes as db_scope_indexes
from ..errors import IllegalTransition, InvalidInput, NotFound
from ..limits import (
    MAX_PAYLOAD_BYTES,
    MAX_PREDICATE_CHARS,
    check_confidence,
    check_json_value,
    check_optional_reason,
    check_subject_id,
    check_text,
    check_validity,
    parse_id,
    parse_ids,
)
from ..models import AssertMode, AssertOutcome, ConflictStatus, Fact, FactAssertion, FactStatus, Volatility
from ..records import conflict_from_row, fact_from_row, facts_or_none
from ..serving.runtime import Runtime
from ..texts import fact_text


@dataclass(frozen=True)
class FactInput:
    subject_id: str
    predicate: str
    value: Any
    confidence: float | None = None
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    source_event_ids: tuple[str, ...] | None = None
    volatility: Volatility = Volatility.STABLE
    mode: AssertMode = AssertMode.SUPERSEDE


def value_hash(value: Any) -> str:
    """Hash of the value's canonical JSON: equal values ignore key order."""
    return hashlib.sha256(orjson.dumps(value, option=orjson.OPT_SORT_KEYS)).hexdigest()


async def assert_fact(rt: Runtime, project_id: str, item: FactInput) -> FactAssertion:
    """Write a fact; an equal ACTIVE value is only reinforced, a different one is handled by `mode`."""
    check_subject_id(item.subject_id)
    check_text("predicate", item.predicate, MAX_PREDICATE_CHARS)
    check_json_value("value", item.value, MAX_PAYLOAD_BYTES)
    check_confidence(item.confidence)
    check_validity(item.valid_from, item.valid_to)
    source_ids = sorted(set(parse_ids(list(item.source_event_ids or ()), "sourceEventIds")))
    text = fact_text(item.predicate, item.value)
    vhash = value_hash(item.value)
    embedding = (await rt.embedder.embed_many([text]))[0]

    async with rt.pool.acquire() as conn, conn.transaction():
        # The lock first: the sources checked are then those a forget of the subject cannot remove.
        await db_facts.lock_subject(conn, project_id, item.subject_id)
        await _check_sources(conn, project_id, item.subject_id, source_ids)
        now = datetime.now(UTC)
        active = [
            (fact_from_row(row), h)
            for row, h in await db_facts.active_for_predicate(conn, project_id, item.subject_id, item.predicate)
        ]
        equal = [fact for fact, h in active if h == vhash]
        if equal:
            fact = fact_from_row(await db_facts.reinforce(conn, project_id, equal[0].id, now, source_ids))
            return FactAssertion(fact=fact, outcome=AssertOutcome.REINFORCED)

        new = fact_from_row(
            await db_facts.insert_fact(
                conn,
                project_id,
                db_facts.NewFact(
                    id=str(uuid.uuid4()),
                    subject_id=item.subject_id,
                    predicate=item.predicate,
                    value=item.value,
                    value_hash=vhash,
                    confidence=item.confidence,
                    volatility=item.volatility.value,
                    valid_from=item.valid_from,
                    valid_to=item.valid_to,
                    recorded_at=now,
                    source_event_ids=source_ids,
                    text=text,
                ),
                embedding,
            )
        )
        grown = await db_scope_indexes.add_rows(conn, project_id, "facts", {item.subject_id: 1})
        others = [fact for fact, _ in active]
        if not others or item.mode is AssertMode.ADD:
            assertion = FactAssertion(fact=new, outcome=AssertOutcome.CREATED)
        elif item.mode is AssertMode.SUPERSEDE:
            assertion = await _supersede(conn, project_id, new, others, now)
        else:
            assertion = await _contest(conn, project_id, new, others, now)
    rt.scope_growth.saw(grown, rt.settings)  # committed: an index pass woken now sees the row
    return assertion


async def _check_sources(conn: asyncpg.Connection, project_id: str, subject_id: str, ids: list[str]) -> None:
    if not ids:
        return
    subjects = await db_events.event_subjects(conn, project_id, ids)
    wrong = [i for i in ids if subjects.get(i) != subject_id]
    if wrong:
        raise InvalidInput(
            f"sourceEventIds must name events of subject {subject_id!r}: {', '.join(wrong[:5])}",
            field="sourceEventIds",
        )


async def _supersede(
    conn: asyncpg.Connection, project_id: str, new: Fact, others: list[Fact], now: datetime
) -> FactAssertion:
    # Superseding members of an OPEN set settles that set: RESOLVED, with no kept fact.
    for conflict_id in sorted({f.open_conflict_id for f in others if f.open_conflict_id}):
        conflict_from_row(
            await db_conflicts.close(
                conn, project_id, conflict_id, status=ConflictStatus.RESOLVED.value, now=now, kept_fact_id=None
            )
        )
    superseded = tuple(
        fact_from_row(r)
        for r in await db_facts.supersede(
            conn, project_id, [f.id for f in others], by_id=new.id, valid_to=new.valid_from or now, ended_at=now
        )
    )
    return FactAssertion(fact=new, outcome=AssertOutcome.SUPERSEDED_PREVIOUS, superseded=superseded)


async def _contest(
    conn: asyncpg.Connection, project_id: str, new: Fact, others: list[Fact], now: datetime
) -> FactAssertion:
    open_ids = sorted({f.open_conflict_id for f in others if f.open_conflict_id})
    if open_ids:
        # Join the open set the earlier facts are in; facts outside it join too.
        conflict_id = open_ids[0]
        joining = [f.id for f in others if f.open_conflict_id is None] + [new.id]
        await db_conflicts.add_members(conn, project_id, conflict_id, joining, now)
        conflict = conflict_from_row(await db_conflicts.get_one(conn, project_id, conflict_id))
    else:
        conflict = conflict_from_row(
            await db_conflicts.create(
                conn,
                project_id,
                conflict_id=str(uuid.uuid4()),
                subject_id=new.subject_id,
                fact_ids=[f.id for f in others] + [new.id],
                reason=None,
                now=now,
            )
        )
    (fresh,) = facts_or_none(await db_facts.get_facts(conn, project_id, [new.id]))
    assert fresh is not None
    return FactAssertion(fact=fresh, outcome=AssertOutcome.CONFLICT_OPENED, conflict=conflict)


async def retract_fact(rt: Runtime, project_id: str, raw_id: str, reason: str | None) -> Fact:
    """ACTIVE or SUPERSEDED, not in an OPEN set -> RETRACTED (never served again)."""
    fact_id = parse_id(raw_id)
    check_optional_reason(reason)
    async with rt.pool.acquire() as conn, conn.transaction():
        (seen,) = facts_or_none(await db_facts.get_facts(conn, project_id, [fact_id]))
        if seen is None:
            raise NotFound(f"no fact {fact_id}", field="id")
        await db_facts.lock_subject(conn, project_id, seen.subject_id)  # before any row lock
        (fact,) = facts_or_none(await db_facts.get_facts(conn, project_id, [fact_id], for_update=True))
        if fact is None:  # its subject was forgotten meanwhile
            raise NotFound(f"no fact {fact_id}", field="id")
        if fact.status is FactStatus.RETRACTED:
            raise IllegalTransition("the fact is already RETRACTED", field="id")
        if fact.open_conflict_id is not None:
            raise IllegalTransition(
                f"the fact is in the OPEN conflict set {fact.open_conflict_id}; resolve or dismiss it first",
                field="id",
            )
        return fact_from_row(await db_facts.retract(conn, project_id, fact_id, reason, datetime.now(UTC)))
