"""Resolvers of `context`, `trace`, `traces` and `stats`."""

from __future__ import annotations

from datetime import datetime

from ..core.context import assembler, served
from ..core.history import traces
from ..core.models import ItemKind, Page
from ..core.packet import ContextPacket, ContextTrace, TraceDecision, TraceTimings
from ..settings import Tokenizer
from .context import PendingTrace, RequestContext


async def context(
    ctx: RequestContext,
    subject_id: str,
    query: str,
    budget: int | None,
    path: tuple[str | int, ...],
    *,
    as_of: datetime | None = None,
    tokenizer: Tokenizer | None = None,
) -> ContextPacket:
    """The packet, returned while its trace is still being written: the response is held until
    the write has committed (schema.writes.AwaitTraceWrites), and serialized meanwhile.

    The assembly (embedding, retrieval, scoring) runs in an admission slot; a call refused one
    is UNAVAILABLE and writes no trace. The trace write is sent before the slot is released and
    committed after: its wait is on the pool, which bounds it, and holding a slot for it would
    leave the CPU idle while calls queue."""
    async with ctx.rt.admission.slot():
        assembly = await assembler.start_assembly(
            ctx.rt, ctx.project_id, subject_id, query, budget, as_of=as_of, tokenizer=tokenizer
        )
    packet = assembly.packet
    ctx.trace_writes[packet.trace.id] = PendingTrace(path, assembly.write)
    # The decisions are in hand: a later `trace.decisions` of this request needs no query.
    ctx.loaders.decisions.prime(packet.trace.id, list(packet.trace.decisions or ()))
    return packet


async def timings(ctx: RequestContext, trace: ContextTrace) -> TraceTimings:
    """A trace's timings; for a trace this request is writing, once the write has committed."""
    pending = ctx.trace_writes.get(trace.id)
    if pending is None:
        return trace.timings
    try:
        persist_ms = await pending.write.committed()
    except Exception:  # reported once, for the whole response (schema.writes)
        return trace.timings
    return assembler.written_timings(trace.timings, persist_ms)


async def trace(ctx: RequestContext, id: str) -> ContextTrace | None:
    return (await traces.traces_by_id(ctx.rt, ctx.project_id, [id]))[0]


async def decisions(ctx: RequestContext, trace: ContextTrace) -> list[TraceDecision]:
    if trace.decisions is not None:
        return list(trace.decisions)
    return await ctx.loaders.decisions.load(trace.id)


async def ranked(ctx: RequestContext, trace: ContextTrace, rows: list[TraceDecision]) -> list[TraceDecision]:
    """A trace's decisions with their overall ranks (core/context/served.py)."""
    return await served.ranked_decisions(ctx.rt, ctx.project_id, trace, rows)


async def rendered(ctx: RequestContext, trace: ContextTrace) -> str | None:
    """The text a trace's call served, rebuilt from its decisions (core/context/served.py)."""
    return await served.rendered_of(ctx.rt, ctx.project_id, trace, await decisions(ctx, trace))


async def load_items(ctx: RequestContext, rows: list[TraceDecision], *, facts: bool, events: bool) -> None:
    """Load the facts and/or events of `rows` into the request's loaders, one batch each."""
    if facts:
        await ctx.loaders.facts.load_many([r.item_id for r in rows if r.item_kind is ItemKind.FACT])
    if events:
        await ctx.loaders.events.load_many([r.item_id for r in rows if r.item_kind is ItemKind.EPISODE])


async def traces_page(
    ctx: RequestContext, subject_id: str | None, since: datetime | None, first: int | None, after: str | None
) -> Page[ContextTrace]:
    return await traces.traces_page(
        ctx.rt, ctx.project_id, subject_id=subject_id, since=since, first=first, after=after
    )


async def stats(ctx: RequestContext, since: datetime | None) -> traces.StatsOverview:
    return await traces.stats(ctx.rt, ctx.project_id, since)
