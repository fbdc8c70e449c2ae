"""Batched lookups by id for the DataLoaders: one query per batch, results in key order."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import asyncpg

from ...db import conflicts as db_conflicts
from ...db import events as db_events
from ...db import facts as db_facts
from ..limits import try_parse_id
from ..models import ConflictSet, Event, Fact
from ..records import conflicts_or_none, events_or_none, facts_or_none
from ..serving.runtime import Runtime

T = TypeVar("T")

Fetch = Callable[[asyncpg.Connection, str, list[str]], Awaitable[list[Any]]]


async def by_id(
    rt: Runtime, project_id: str, ids: list[str], fetch: Fetch, convert: Callable[[list[Any]], list[T | None]]
) -> list[T | None]:
    """`fetch` the valid ids once (rows in the order asked), convert, and answer in `ids`' order.

    Malformed ids, unknown ids and other projects' ids all answer None.
    """
    parsed = {i: try_parse_id(i) for i in ids}
    valid = sorted({p for p in parsed.values() if p is not None})
    if not valid:
        return [None] * len(ids)
    found = dict(zip(valid, convert(await rt.reads.run(lambda conn: fetch(conn, project_id, valid)))))
    return [found.get(parsed[i] or "") for i in ids]


async def events_by_id(rt: Runtime, project_id: str, ids: list[str]) -> list[Event | None]:
    return await by_id(rt, project_id, ids, db_events.get_events, events_or_none)


async def facts_by_id(rt: Runtime, project_id: str, ids: list[str]) -> list[Fact | None]:
    return await by_id(rt, project_id, ids, db_facts.get_facts, facts_or_none)


async def conflicts_by_id(rt: Runtime, project_id: str, ids: list[str]) -> list[ConflictSet | None]:
    return await by_id(rt, project_id, ids, db_conflicts.get_conflicts, conflicts_or_none)
