"""Conflict sets: open, resolve (keep one), dismiss (keep all)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import asyncpg

from ...db import conflicts as db_conflicts
from ...db import facts as db_facts
from ..errors import IllegalTransition, InvalidInput, NotFound
from ..limits import MAX_CONFLICT_FACTS, MIN_CONFLICT_FACTS, check_optional_reason, parse_id, parse_ids
from ..models import ConflictSet, ConflictStatus, FactStatus
from ..records import conflict_from_row, conflict_or_none, conflicts_or_none, facts_or_none
from ..serving.runtime import Runtime


async def open_conflict(rt: Runtime, project_id: str, raw_ids: list[str], reason: str | None) -> ConflictSet:
    """A new OPEN set of 2..250 ACTIVE facts of one subject, none already in an OPEN set."""
    if not MIN_CONFLICT_FACTS <= len(raw_ids) <= MAX_CONFLICT_FACTS:
        raise InvalidInput(f"factIds must hold {MIN_CONFLICT_FACTS}..{MAX_CONFLICT_FACTS} ids", field="factIds")
    ids = parse_ids(raw_ids, "factIds")
    if len(set(ids)) != len(ids):
        raise InvalidInput("factIds must not repeat an id", field="factIds")
    check_optional_reason(reason)
    async with rt.pool.acquire() as conn, conn.transaction():
        seen = facts_or_none(await db_facts.get_facts(conn, project_id, ids))
        missing = [i for i, f in zip(ids, seen) if f is None]
        if missing:
            raise NotFound(f"no fact {', '.join(missing[:5])}", field="factIds")
        subjects = {f.subject_id for f in seen if f is not None}
        if len(subjects) != 1:
            raise InvalidInput("every fact of a conflict set must belong to one subject", field="factIds")
        await db_facts.lock_subject(conn, project_id, subjects.pop())  # before any row lock
        present = [
            f for f in facts_or_none(await db_facts.get_facts(conn, project_id, ids, for_update=True)) if f is not None
        ]
        if len(present) != len(ids):  # the subject was forgotten meanwhile
            raise NotFound(f"no fact {', '.join(sorted(set(ids) - {f.id for f in present})[:5])}", field="factIds")
        if any(f.status is not FactStatus.ACTIVE for f in present):
            raise InvalidInput("every fact of a conflict set must be ACTIVE", field="factIds")
        if any(f.open_conflict_id for f in present):
            raise InvalidInput("a fact is already in an OPEN conflict set", field="factIds")
        now = datetime.now(UTC)
        return conflict_from_row(
            await db_conflicts.create(
                conn,
                project_id,
                conflict_id=str(uuid.uuid4()),
                subject_id=present[0].subject_id,
                fact_ids=ids,
                reason=reason,
                now=now,
            )
        )


async def resolve_conflict(rt: Runtime, project_id: str, raw_id: str, raw_keep: str) -> ConflictSet:
    """Keep one member ACTIVE; supersede the others by it; the set becomes RESOLVED."""
    conflict_id = parse_id(raw_id)
    keep = parse_id(raw_keep, "keepFactId")
    async with rt.pool.acquire() as conn, conn.transaction():
        conflict = await _lock_open(conn, project_id, conflict_id)
        if keep not in conflict.fact_ids:
            raise IllegalTransition("keepFactId is not a member of this conflict set", field="keepFactId")
        now = datetime.now(UTC)
        closed = conflict_from_row(
            await db_conflicts.close(
                conn, project_id, conflict_id, status=ConflictStatus.RESOLVED.value, now=now, kept_fact_id=keep
            )
        )
        others = [f for f in conflict.fact_ids if f != keep]
        facts_or_none(await db_facts.supersede(conn, project_id, others, by_id=keep, valid_to=now, ended_at=now))
        return closed


async def dismiss_conflict(rt: Runtime, project_id: str, raw_id: str) -> ConflictSet:
    """Close the set without a winner: its facts are served again."""
    conflict_id = parse_id(raw_id)
    async with rt.pool.acquire() as conn, conn.transaction():
        await _lock_open(conn, project_id, conflict_id)
        now = datetime.now(UTC)
        return conflict_from_row(
            await db_conflicts.close(
                conn, project_id, conflict_id, status=ConflictStatus.DISMISSED.value, now=now, kept_fact_id=None
            )
        )


async def _lock_open(conn: asyncpg.Connection, project_id: str, conflict_id: str) -> ConflictSet:
    """The OPEN set, locked after its subject's write lock (the order every fact write follows)."""
    (seen,) = conflicts_or_none(await db_conflicts.get_conflicts(conn, project_id, [conflict_id]))
    if seen is None:
        raise NotFound(f"no conflict set {conflict_id}", field="id")
    await db_facts.lock_subject(conn, project_id, seen.subject_id)
    conflict = conflict_or_none(await db_conflicts.lock(conn, project_id, conflict_id))
    if conflict is None:  # its subject was forgotten meanwhile
        raise NotFound(f"no conflict set {conflict_id}", field="id")
    if conflict.status is not ConflictStatus.OPEN:
        raise IllegalTransition(f"the conflict set is {conflict.status.value}, not OPEN", field="id")
    return conflict
