"""Query resolvers: arguments in, core reads out."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

from strawberry.dataloader import DataLoader

from ..core.memory import reads
from ..core.models import ConflictSet, ConflictStatus, Event, Fact, FactStatus, Page
from .context import RequestContext

T = TypeVar("T")


async def fact(ctx: RequestContext, id: str) -> Fact | None:
    return await reads.fact(ctx.rt, ctx.project_id, id)


async def event(ctx: RequestContext, id: str) -> Event | None:
    return await reads.event(ctx.rt, ctx.project_id, id)


async def facts(
    ctx: RequestContext, subject_id: str, status: FactStatus | None, first: int | None, after: str | None
) -> Page[Fact]:
    return await reads.facts_page(ctx.rt, ctx.project_id, subject_id, status=status, first=first, after=after)


async def events(ctx: RequestContext, subject_id: str, first: int | None, after: str | None) -> Page[Event]:
    return await reads.events_page(ctx.rt, ctx.project_id, subject_id, first, after)


async def conflicts(
    ctx: RequestContext,
    subject_id: str | None,
    status: ConflictStatus | None,
    first: int | None,
    after: str | None,
) -> Page[ConflictSet]:
    return await reads.conflicts_page(
        ctx.rt, ctx.project_id, subject_id=subject_id, status=status, first=first, after=after
    )


async def events_of(ctx: RequestContext, ids: tuple[str, ...]) -> list[Event]:
    """Events by id through the request's DataLoader (unknown ids are dropped)."""
    loaded = await ctx.loaders.events.load_many(list(ids))
    return [e for e in loaded if e is not None]


async def facts_of(ctx: RequestContext, ids: tuple[str, ...]) -> list[Fact]:
    """Facts by id through the request's DataLoader (unknown ids are dropped)."""
    loaded = await ctx.loaders.facts.load_many(list(ids))
    return [f for f in loaded if f is not None]


async def fact_of(ctx: RequestContext, id: str | None) -> Fact | None:
    return None if id is None else await ctx.loaders.facts.load(id)


async def event_of(ctx: RequestContext, id: str | None) -> Event | None:
    return None if id is None else await ctx.loaders.events.load(id)


def fact_loaded(ctx: RequestContext, id: str) -> Fact | Awaitable[Fact | None] | None:
    """The fact at once when this request has loaded it already, else an awaitable of it."""
    return _loaded(ctx.loaders.facts, id)


def event_loaded(ctx: RequestContext, id: str) -> Event | Awaitable[Event | None] | None:
    """The event at once when this request has loaded it already, else an awaitable of it."""
    return _loaded(ctx.loaders.events, id)


def _loaded(loader: DataLoader[str, T], key: str) -> T | Awaitable[T]:
    future = loader.cache_map.get(key)
    if future is not None and future.done() and not future.cancelled() and future.exception() is None:
        return future.result()
    return loader.load(key)
