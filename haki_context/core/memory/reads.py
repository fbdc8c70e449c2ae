"""Reads by id and keyset-paginated lists, scoped to the caller's project."""

from __future__ import annotations

from ...db import conflicts as db_conflicts
from ...db import events as db_events
from ...db import facts as db_facts
from ..limits import check_page_size, check_subject_id, try_parse_id
from ..models import ConflictSet, ConflictStatus, Event, Fact, FactStatus, Page
from ..pagination import decode_cursor, encode_cursor
from ..records import conflict_from_row, event_from_row, events_or_none, fact_from_row, facts_or_none
from ..serving.runtime import Runtime


async def fact(rt: Runtime, project_id: str, raw_id: str) -> Fact | None:
    fact_id = try_parse_id(raw_id)
    if fact_id is None:
        return None
    return facts_or_none(await rt.reads.run(lambda conn: db_facts.get_facts(conn, project_id, [fact_id])))[0]


async def event(rt: Runtime, project_id: str, raw_id: str) -> Event | None:
    event_id = try_parse_id(raw_id)
    if event_id is None:
        return None
    return events_or_none(await rt.reads.run(lambda conn: db_events.get_events(conn, project_id, [event_id])))[0]


async def facts_page(
    rt: Runtime,
    project_id: str,
    subject_id: str,
    *,
    status: FactStatus | None,
    first: int | None,
    after: str | None,
) -> Page[Fact]:
    check_subject_id(subject_id)
    size = check_page_size(first, 50)
    key = decode_cursor(after)
    found = await rt.reads.run(
        lambda conn: db_facts.page_facts(
            conn, project_id, subject_id, status=status.value if status else None, limit=size + 1, after=key
        )
    )
    rows = [fact_from_row(r) for r in found]
    return Page([(encode_cursor(f.recorded_at, f.id), f) for f in rows[:size]], len(rows) > size)


async def events_page(
    rt: Runtime, project_id: str, subject_id: str, first: int | None, after: str | None
) -> Page[Event]:
    check_subject_id(subject_id)
    size = check_page_size(first, 50)
    key = decode_cursor(after)
    found = await rt.reads.run(lambda conn: db_events.page_events(conn, project_id, subject_id, size + 1, key))
    rows = [event_from_row(r) for r in found]
    return Page([(encode_cursor(e.occurred_at, e.id), e) for e in rows[:size]], len(rows) > size)


async def conflicts_page(
    rt: Runtime,
    project_id: str,
    *,
    subject_id: str | None,
    status: ConflictStatus | None,
    first: int | None,
    after: str | None,
) -> Page[ConflictSet]:
    if subject_id is not None:
        check_subject_id(subject_id)
    size = check_page_size(first, 50)
    key = decode_cursor(after)
    found = await rt.reads.run(
        lambda conn: db_conflicts.page_conflicts(
            conn,
            project_id,
            subject_id=subject_id,
            status=status.value if status else None,
            limit=size + 1,
            after=key,
        )
    )
    rows = [conflict_from_row(r) for r in found]
    return Page([(encode_cursor(c.created_at, c.id), c) for c in rows[:size]], len(rows) > size)
