"""Forgetting a subject: everything a project holds about it, deleted in one transaction.

    counts = await forget_subject(pool, caller, "user-42")

The one entry point, for GraphQL (`forgetSubject`), the command line (`haki-context forget`)
and any other front end: it checks the caller's `erase` scope itself. Events and their chunks,
facts, conflict sets and their members, traces and their decisions, the subject's row counts,
its scope-index entries and common lexemes go in one transaction holding the subject's erase
lock (db/subject_locks.py), which every write of the subject shares: a concurrent write lands
wholly before (and is deleted) or wholly after (and stays). One audit row (`erasures`) records
the forget without any content. Then, outside the transaction, the subject's own vector
indexes (large scopes only) are dropped concurrently, so other subjects are never blocked.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from datetime import UTC, datetime

import asyncpg

from ...db import erasure as db_erasure
from ...db import subject_locks
from ...db.pool import without_statement_timeout
from ..limits import check_subject_id
from ..serving.auth import Caller, Scope

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ForgetCounts:
    """What one forget deleted, by kind, and the id of its audit record."""

    erasure_id: str
    subject_id: str
    forgotten_at: datetime
    events: int
    episode_chunks: int
    facts: int
    conflict_sets: int
    conflict_members: int
    traces: int
    trace_decisions: int
    scope_lexemes: int
    scope_indexes: int  # the subject's own HNSW / IVFFlat indexes dropped

    @property
    def held_nothing(self) -> bool:
        """True when the subject held no row of any kind (the forget is recorded all the same)."""
        return not any(
            (
                self.events,
                self.episode_chunks,
                self.facts,
                self.conflict_sets,
                self.conflict_members,
                self.traces,
                self.trace_decisions,
                self.scope_lexemes,
                self.scope_indexes,
            )
        )


def subject_hash(project_id: str, subject_id: str) -> bytes:
    """SHA-256 of (project, subject): how the audit record names a subject without holding its id."""
    return hashlib.sha256(f"{project_id}\x1f{subject_id}".encode()).digest()


async def forget_subject(pool: asyncpg.Pool, caller: Caller, subject_id: str) -> ForgetCounts:
    """Delete everything `caller`'s project holds about `subject_id`; FORBIDDEN without `erase`.

    A subject that holds nothing is forgotten all the same (counts of zero, one audit row):
    the request was carried out."""
    caller.require(Scope.ERASE)
    check_subject_id(subject_id)
    project_id = caller.project_id
    now = datetime.now(UTC)
    # A large subject's deletes may outlast a request's statement timeout; an erasure cut half way
    # would be rolled back and have to start over, so it runs to the end (no timeout on the server,
    # nor here).
    async with pool.acquire() as conn, without_statement_timeout(conn):
        async with conn.transaction():
            await subject_locks.own(conn, project_id, subject_id)
            counts = await db_erasure.delete_subject(conn, project_id, subject_id)
            erasure_id = await db_erasure.insert_erasure(
                conn,
                project_id,
                subject_hash=subject_hash(project_id, subject_id),
                counts=counts,
                key_id=caller.key_id,
                actor=caller.origin.value,
                erased_at=now,
            )
        dropped = await _drop_scope_indexes(conn, project_id, subject_id)
    return ForgetCounts(
        erasure_id=erasure_id,
        subject_id=subject_id,
        forgotten_at=now,
        events=counts["events"],
        episode_chunks=counts["episode_chunks"],
        facts=counts["facts"],
        conflict_sets=counts["conflict_sets"],
        conflict_members=counts["conflict_members"],
        traces=counts["traces"],
        trace_decisions=counts["trace_decisions"],
        scope_lexemes=counts["scope_lexemes"],
        scope_indexes=dropped,
    )


async def _drop_scope_indexes(conn: asyncpg.Connection, project_id: str, subject_id: str) -> int:
    """Drop the subject's own vector indexes, if it had any. Their rows are deleted already, so a
    drop that fails (a database restart) loses nothing: the index builder's next pass drops
    indexes no scope owns any more (core/serving/scope_indexes.py)."""
    try:
        return await db_erasure.drop_scope_indexes(conn, db_erasure.scope_index_names(project_id, subject_id))
    except (asyncpg.PostgresError, OSError) as exc:
        log.warning("forget: the scope indexes of a forgotten subject were not dropped (%s); the builder will", exc)
        return 0
