"""Writes racing forgetSubject land wholly before it (and are deleted) or wholly after it (and
stay), never half: the subject's erase lock, shared by every write and owned by the forget."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest
from conftest import ProjectClient, client_for
from contextlib_helpers import record
from test_forget import FORGET, project_key

from haki_context.core.memory.erasure import forget_subject
from haki_context.core.serving.auth import Caller
from haki_context.core.serving.runtime import Runtime
from haki_context.db import events as db_events
from haki_context.db import subject_locks

# Waiting for a lock to be queued: a bound on the wait, not a timing being judged.
WAIT_BOUND_S = 30.0


@pytest.fixture
async def eraser(runtime: Runtime) -> AsyncIterator[ProjectClient]:
    project_id = f"project-{uuid.uuid4().hex[:12]}"
    key, _ = await project_key(runtime, project_id, ("read", "write", "erase"))
    base = client_for(runtime)
    yield ProjectClient(base.http, key, project_id)
    await base.http.aclose()


async def waiting_advisory_locks(rt: Runtime) -> int:
    async with rt.pool.acquire() as conn:
        n: int = await conn.fetchval("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
    return n


async def until_waiting(rt: Runtime, n: int) -> None:
    """Return once `n` advisory lock requests are queued (fails past WAIT_BOUND_S)."""
    async with asyncio.timeout(WAIT_BOUND_S):
        while await waiting_advisory_locks(rt) < n:
            await asyncio.sleep(0.01)


async def subject_rows(rt: Runtime, project_id: str, subject: str) -> dict[str, Any]:
    async with rt.pool.acquire() as conn:
        row = await conn.fetchrow(
            """
            SELECT (SELECT count(*) FROM events WHERE project_id = $1 AND subject_id = $2) AS events,
                   (SELECT count(*) FROM episode_chunks WHERE project_id = $1 AND subject_id = $2) AS chunks,
                   (SELECT count(*) FROM facts WHERE project_id = $1 AND subject_id = $2) AS facts,
                   (SELECT chunk_rows FROM subjects WHERE project_id = $1 AND subject_id = $2) AS chunk_rows,
                   (SELECT fact_rows FROM subjects WHERE project_id = $1 AND subject_id = $2) AS fact_rows,
                   (SELECT count(*) FROM facts f WHERE f.project_id = $1 AND f.subject_id = $2
                      AND EXISTS (SELECT 1 FROM unnest(f.source_event_ids) AS s(id)
                                  WHERE NOT EXISTS (SELECT 1 FROM events e
                                                    WHERE e.project_id = $1 AND e.id = s.id))) AS dangling,
                   ARRAY(SELECT id::text FROM events WHERE project_id = $1 AND subject_id = $2) AS event_ids
            """,
            project_id,
            subject,
        )
    return dict(row)


async def test_a_write_under_way_is_deleted_whole_and_a_write_queued_behind_the_forget_stays(
    eraser: ProjectClient, runtime: Runtime, migrated: str, subject: str
) -> None:
    await record(eraser, subject, ["before the forget"])
    conn: asyncpg.Connection = await asyncpg.connect(migrated)
    try:
        # A write under way: it holds the subject's erase lock (shared) and has written an event.
        in_flight = str(uuid.uuid4())
        tx = conn.transaction()
        await tx.start()
        await subject_locks.share(conn, eraser.project_id, [subject])
        now = datetime.now(UTC)
        await db_events.insert_events(
            conn,
            eraser.project_id,
            [db_events.NewEvent(in_flight, subject, "note", {"text": "in flight"}, now, now, "note")],
        )
        caller = Caller.operator(eraser.project_id)
        forgetting = asyncio.create_task(forget_subject(runtime.pool, caller, subject))
        await until_waiting(runtime, 1)  # the forget waits for the write
        after = asyncio.create_task(record(eraser, subject, ["after the forget"]))
        await until_waiting(runtime, 2)  # the next write waits behind the forget
        assert not forgetting.done() and not after.done()
        await tx.commit()
        counts = await forgetting
        (late,) = await after
    finally:
        await conn.close()

    assert counts.events == 2  # the event recorded before and the one in flight
    rows = await subject_rows(runtime, eraser.project_id, subject)
    assert rows["event_ids"] == [late]
    assert rows["chunks"] == rows["chunk_rows"] == 1


async def test_writes_racing_forgets_are_never_half_kept(eraser: ProjectClient, runtime: Runtime, subject: str) -> None:
    """Rounds of concurrent event batches and fact writes with a forget among them: every batch is
    kept whole or not at all, counters match the rows, no fact names a forgotten event, and a
    write that lost the race gets a typed error, never INTERNAL."""
    batches: dict[str, list[str]] = {}  # the batch's marker -> its event ids, for batches that succeeded
    errors: list[str] = []

    async def batch(marker: str) -> None:
        body = (
            await eraser.post(
                "mutation($i: [EventInput!]!) { recordEvents(inputs: $i) { id } }",
                {
                    "i": [
                        {"subjectId": subject, "kind": "note", "payload": {"text": f"{marker} part {k}"}}
                        for k in range(3)
                    ]
                },
            )
        ).json()
        if body.get("errors"):
            errors.append(body["errors"][0]["extensions"]["code"])
        else:
            batches[marker] = [e["id"] for e in body["data"]["recordEvents"]]

    async def fact(marker: str, sources: list[str]) -> None:
        body = (
            await eraser.post(
                "mutation($i: FactInput!) { assertFact(input: $i) { fact { id } } }",
                {"i": {"subjectId": subject, "predicate": "mood", "value": marker, "sourceEventIds": sources}},
            )
        ).json()
        if body.get("errors"):
            errors.append(body["errors"][0]["extensions"]["code"])

    for round_ in range(6):
        seed = await record(eraser, subject, [f"seed {round_}"])
        writes = [batch(f"r{round_}b{k}") for k in range(4)] + [fact(f"r{round_}f{k}", seed) for k in range(3)]
        forget = eraser.execute(FORGET, {"s": subject})
        await asyncio.gather(*writes[:3], forget, *writes[3:])

    assert set(errors) <= {"INVALID_INPUT", "NOT_FOUND"}, errors
    rows = await subject_rows(runtime, eraser.project_id, subject)
    present = set(rows["event_ids"])
    for marker, ids in batches.items():
        kept = [i in present for i in ids]
        assert all(kept) or not any(kept), f"batch {marker} was kept in part: {kept}"
    assert rows["chunks"] == (rows["chunk_rows"] or 0)
    assert rows["facts"] == (rows["fact_rows"] or 0)
    assert rows["dangling"] == 0
