"""Reading persisted traces back: by id, in pages, as stats; and pruning old ones."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import asyncpg

from ..db import traces as db_traces
from .limits import check_aware, check_page_size, check_subject_id
from .loading import by_id
from .models import Page, ReasonCode
from .packet import ContextTrace, TraceDecision
from .pagination import decode_cursor, encode_cursor
from .records import decision_from_row, trace_from_row
from .runtime import Runtime


async def traces_by_id(rt: Runtime, project_id: str, ids: list[str]) -> list[ContextTrace | None]:
    """Traces by id, in the order asked; None where unknown, malformed or of another project."""
    return await by_id(rt, project_id, ids, db_traces.get_traces, lambda rows: [r and trace_from_row(r) for r in rows])


async def decisions_by_trace(rt: Runtime, project_id: str, trace_ids: list[str]) -> list[list[TraceDecision]]:
    """The decisions of each trace, in written (rank) order; one query for all."""
    async with rt.pool.acquire() as conn:
        rows = await db_traces.decisions_for(conn, project_id, trace_ids)
    out: dict[str, list[TraceDecision]] = {t: [] for t in trace_ids}
    for r in rows:
        out[str(r["trace_id"])].append(decision_from_row(r))
    return [out[t] for t in trace_ids]


async def traces_page(
    rt: Runtime,
    project_id: str,
    subject_id: str | None,
    since: datetime | None,
    first: int | None,
    after: str | None,
) -> Page[ContextTrace]:
    """Traces newest first; decisions are loaded only if a client selects them."""
    if subject_id is not None:
        check_subject_id(subject_id)
    check_aware("since", since)
    size = check_page_size(first, 20)
    key = decode_cursor(after)
    async with rt.pool.acquire() as conn:
        rows = await db_traces.page_traces(conn, project_id, subject_id, since, size + 1, key)
    traces = [trace_from_row(r) for r in rows]
    return Page([(encode_cursor(t.created_at, t.id), t) for t in traces[:size]], len(traces) > size)


@dataclass(frozen=True)
class StatsOverview:
    context_calls: int
    injection_rate: float
    empty_calls: int
    no_relevant_memory_calls: int
    degraded_calls: int
    avg_facts_served: float
    avg_used_tokens: float
    latency_p50_ms: float | None
    latency_p95_ms: float | None
    reason_codes: tuple[tuple[ReasonCode, int], ...]
    active_facts: int
    events: int
    open_conflicts: int
    oldest_open_conflict_seconds: float | None

    @property
    def hit_rate(self) -> float:
        """Deprecated alias of injection_rate."""
        return self.injection_rate


async def stats(rt: Runtime, project_id: str, since: datetime | None) -> StatsOverview:
    """docs/design.md "Stats", field by field: windowed call figures, current totals."""
    check_aware("since", since)
    async with rt.pool.acquire() as conn:
        row = await db_traces.stats(conn, project_id, since)
    calls = int(row["calls"])
    oldest = row["oldest_open"]
    return StatsOverview(
        context_calls=calls,
        injection_rate=(row["injected"] / calls) if calls else 0.0,
        empty_calls=int(row["empty"]),
        no_relevant_memory_calls=int(row["no_relevant"]),
        degraded_calls=int(row["degraded"]),
        avg_facts_served=(row["facts_served"] / calls) if calls else 0.0,
        avg_used_tokens=(row["used_tokens"] / calls) if calls else 0.0,
        latency_p50_ms=row["latency"][0] if calls else None,
        latency_p95_ms=row["latency"][1] if calls else None,
        reason_codes=tuple((ReasonCode(code), int(row[col])) for code, col in db_traces.REASON_COLUMNS.items()),
        active_facts=int(row["active_facts"]),
        events=int(row["events"]),
        open_conflicts=int(row["open_conflicts"]),
        oldest_open_conflict_seconds=(datetime.now(UTC) - oldest).total_seconds() if oldest else None,
    )


async def prune(pool: asyncpg.Pool, older_than_days: float, *, batch_size: int = 1000) -> int:
    """Delete traces older than the retention, in short batches; returns how many were deleted."""
    before = datetime.now(UTC) - timedelta(days=older_than_days)
    total = 0
    while True:
        async with pool.acquire() as conn:
            deleted = await db_traces.prune_batch(conn, before, batch_size)
        total += deleted
        if deleted < batch_size:
            return total
        await asyncio.sleep(0)  # let context calls through between batches
