"""Recording events: validation, chunking, embedding, one all-or-nothing write."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from ...db import events as db_events
from ...db import subject_locks
from ..errors import InvalidInput
from ..limits import (
    MAX_BATCH,
    MAX_KIND_CHARS,
    MAX_PAYLOAD_BYTES,
    check_aware,
    check_json_value,
    check_subject_id,
    check_text,
)
from ..models import Event
from ..serving.runtime import Runtime
from ..texts import event_chunks, event_excerpt


@dataclass(frozen=True)
class EventInput:
    subject_id: str
    kind: str
    payload: Any
    occurred_at: datetime | None = None


async def _write(
    rt: Runtime, project_id: str, events: list[db_events.NewEvent], chunks: list[db_events.NewChunk]
) -> None:
    """Embed and insert chunks in a pipeline, all in one transaction.

    While the database inserts batch k (HNSW maintenance is its main cost), the
    embedder thread encodes batch k + 1: on two cores the write costs little more
    than the embedding itself. The chunks are batched by text length, as one call of
    the encoder would batch them (a batch is padded to its longest text), which embeds
    faster than the events' order (docs/performance.md); the rows' order in the table
    means nothing.
    """
    size = rt.settings.embed_batch_size
    by_length = sorted(chunks, key=lambda c: len(c.text))
    parts = [by_length[i : i + size] for i in range(0, len(by_length), size)]
    pending = asyncio.ensure_future(rt.embedder.embed_many([c.text for c in parts[0]]))
    try:
        async with rt.pool.acquire() as conn, conn.transaction():
            await subject_locks.share(conn, project_id, [e.subject_id for e in events])  # see forgetSubject
            await db_events.insert_events(conn, project_id, events)
            for k, part in enumerate(parts):
                vectors = await pending
                if k + 1 < len(parts):
                    pending = asyncio.ensure_future(rt.embedder.embed_many([c.text for c in parts[k + 1]]))
                await db_events.insert_chunks(conn, project_id, part, vectors)
            grown = await db_events.add_chunk_counts(conn, project_id, chunks)
        rt.scope_growth.saw(grown, rt.settings)  # committed: an index pass woken now sees the rows
    finally:
        if not pending.done():
            pending.cancel()
            with contextlib.suppress(BaseException):
                await pending


def _in_order(now: datetime, index: int, count: int) -> datetime:
    """When an event given without occurredAt occurred: when it was recorded, and in a batch a
    microsecond before the next one, so a conversation recorded in one call keeps its order
    wherever events are listed by time (the last one at `now`, none after it)."""
    return now - timedelta(microseconds=count - 1 - index)


async def record_events(rt: Runtime, project_id: str, inputs: list[EventInput]) -> list[Event]:
    """Validate every input first, then embed and write everything in one transaction (all or nothing)."""
    if len(inputs) > MAX_BATCH:
        raise InvalidInput(f"at most {MAX_BATCH} events per call", field="inputs")
    now = datetime.now(UTC)
    limit = rt.settings.episode_excerpt_chars
    events: list[db_events.NewEvent] = []
    chunks: list[db_events.NewChunk] = []
    for index, item in enumerate(inputs):
        prefix = f"inputs[{index}]." if len(inputs) > 1 else ""
        try:
            check_subject_id(item.subject_id)
            check_text("kind", item.kind, MAX_KIND_CHARS)
            check_json_value("payload", item.payload, MAX_PAYLOAD_BYTES)
            check_aware("occurredAt", item.occurred_at)
        except InvalidInput as exc:
            raise InvalidInput(f"{prefix}{exc.message}", field=f"{prefix}{exc.field}") from exc
        event = db_events.NewEvent(
            id=str(uuid.uuid4()),
            subject_id=item.subject_id,
            kind=item.kind,
            payload=item.payload,
            occurred_at=item.occurred_at or _in_order(now, index, len(inputs)),
            recorded_at=now,
            excerpt=event_excerpt(item.kind, item.payload, limit),
        )
        events.append(event)
        for chunk in event_chunks(item.kind, item.payload, limit):
            chunks.append(
                db_events.NewChunk(
                    event_id=event.id,
                    position=chunk.position,
                    subject_id=event.subject_id,
                    kind=event.kind,
                    occurred_at=event.occurred_at,
                    text=chunk.text,
                    excerpt=chunk.excerpt,
                    is_turn=chunk.is_turn,
                    speaker=chunk.speaker,
                )
            )
    if not events:
        return []
    await _write(rt, project_id, events, chunks)
    return [Event(e.id, e.subject_id, e.kind, e.payload, e.occurred_at, e.recorded_at, e.excerpt) for e in events]
