"""Batched lookups by id for the DataLoaders: one query per batch, results in key order."""

from __future__ import annotations

from ..db import conflicts as db_conflicts
from ..db import events as db_events
from ..db import facts as db_facts
from .limits import try_parse_id
from .models import ConflictSet, Event, Fact
from .records import conflicts_or_none, events_or_none, facts_or_none
from .runtime import Runtime


def _valid(ids: list[str]) -> list[str]:
    return sorted({p for p in (try_parse_id(i) for i in ids) if p is not None})


async def events_by_id(rt: Runtime, project_id: str, ids: list[str]) -> list[Event | None]:
    valid = _valid(ids)
    if not valid:
        return [None] * len(ids)
    async with rt.pool.acquire() as conn:
        found = dict(zip(valid, events_or_none(await db_events.get_events(conn, project_id, valid))))
    return [found.get(try_parse_id(i) or "") for i in ids]


async def facts_by_id(rt: Runtime, project_id: str, ids: list[str]) -> list[Fact | None]:
    valid = _valid(ids)
    if not valid:
        return [None] * len(ids)
    async with rt.pool.acquire() as conn:
        found = dict(zip(valid, facts_or_none(await db_facts.get_facts(conn, project_id, valid))))
    return [found.get(try_parse_id(i) or "") for i in ids]


async def conflicts_by_id(rt: Runtime, project_id: str, ids: list[str]) -> list[ConflictSet | None]:
    valid = _valid(ids)
    if not valid:
        return [None] * len(ids)
    async with rt.pool.acquire() as conn:
        found = dict(zip(valid, conflicts_or_none(await db_conflicts.get_conflicts(conn, project_id, valid))))
    return [found.get(try_parse_id(i) or "") for i in ids]
