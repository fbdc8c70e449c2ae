"""Reading persisted traces back: by id, in pages, as stats; and pruning old ones."""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import asyncpg

from ...db import traces as db_traces
from ..errors import InvalidInput
from ..limits import check_aware, check_page_size, check_subject_id
from ..memory.loading import by_id
from ..models import Page, ReasonCode
from ..packet import ContextTrace, TraceDecision
from ..pagination import decode_cursor, encode_cursor
from ..records import decision_from_row, trace_from_row
from ..serving.runtime import Runtime


async def traces_by_id(rt: Runtime, project_id: str, ids: list[str]) -> list[ContextTrace | None]:
    """Traces by id, in the order asked; None where unknown, malformed or of another project."""
    return await by_id(rt, project_id, ids, db_traces.get_traces, lambda rows: [r and trace_from_row(r) for r in rows])


async def decisions_by_trace(rt: Runtime, project_id: str, trace_ids: list[str]) -> list[list[TraceDecision]]:
    """The decisions of each trace, in written (rank) order; one query for all."""
    rows = await rt.reads.run(lambda conn: db_traces.decisions_for(conn, project_id, trace_ids))
    out: dict[str, list[TraceDecision]] = {t: [] for t in trace_ids}
    for r in rows:
        out[str(r["trace_id"])].append(decision_from_row(r))
    return [out[t] for t in trace_ids]


async def traces_page(
    rt: Runtime,
    project_id: str,
    *,
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
    rows = await rt.reads.run(
        lambda conn: db_traces.page_traces(
            conn, project_id, subject_id=subject_id, since=since, limit=size + 1, after=key
        )
    )
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
    row = await rt.reads.run(lambda conn: db_traces.stats(conn, project_id, since))
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


class StatsBucket(str, enum.Enum):
    """The width of a stats series' buckets, aligned to UTC (weeks start on Monday)."""

    HOUR = "HOUR"
    DAY = "DAY"
    WEEK = "WEEK"

    @property
    def width(self) -> timedelta:
        """The bucket's length."""
        return _BUCKET_WIDTHS[self]


_BUCKET_WIDTHS = {
    StatsBucket.HOUR: timedelta(hours=1),
    StatsBucket.DAY: timedelta(days=1),
    StatsBucket.WEEK: timedelta(days=7),
}

# A Monday at 00:00 UTC: every bucket starts a whole number of widths after it (SERIES_SQL's origin).
_BUCKET_ORIGIN = datetime(2000, 1, 3, tzinfo=UTC)

# Most buckets one series may hold: 41 days of hours, 2.7 years of days. A plot has no use for
# more points than that, and the statement's cost grows with the window, not with its points.
MAX_SERIES_BUCKETS = 1000


class TracePhase(str, enum.Enum):
    """A step of a context call that its trace times (TraceTimings)."""

    EMBED = "EMBED"
    RETRIEVE = "RETRIEVE"
    PACK = "PACK"
    PERSIST = "PERSIST"
    TOTAL = "TOTAL"


@dataclass(frozen=True)
class PhaseLatency:
    """Percentiles of one phase's milliseconds over a bucket's calls (None without calls)."""

    phase: TracePhase
    p50_ms: float | None
    p95_ms: float | None


@dataclass(frozen=True)
class StatsBucketRow:
    """The figures of one bucket of a stats series, computed as `stats` computes them."""

    start: datetime
    end: datetime
    context_calls: int
    injected_calls: int
    empty_calls: int
    no_relevant_memory_calls: int
    degraded_calls: int
    facts_served: int
    used_tokens: int
    reason_codes: tuple[tuple[ReasonCode, int], ...]
    latency: tuple[PhaseLatency, ...]

    @property
    def injection_rate(self) -> float:
        """Calls that served at least one fact / calls; 0 with no calls."""
        return self.injected_calls / self.context_calls if self.context_calls else 0.0

    @property
    def empty_rate(self) -> float:
        """Calls that served nothing / calls; 0 with no calls."""
        return self.empty_calls / self.context_calls if self.context_calls else 0.0

    def reason_count(self, *codes: ReasonCode) -> int:
        """Decisions carrying any of `codes` in the bucket."""
        return sum(n for code, n in self.reason_codes if code in codes)


def series_window(since: datetime, until: datetime | None, bucket: StatsBucket) -> tuple[datetime, datetime]:
    """The checked window [since, until) of a series (until: now by default)."""
    check_aware("since", since)
    check_aware("until", until)
    end = until if until is not None else datetime.now(UTC)
    if since >= end:
        raise InvalidInput("`since` must be before `until` (or before now)", field="since")
    first = _bucket_start(since, bucket)
    if (end - first) / bucket.width > MAX_SERIES_BUCKETS:
        raise InvalidInput(
            f"the window holds more than {MAX_SERIES_BUCKETS} {bucket.value.lower()} buckets; "
            "shorten it or choose a wider bucket",
            field="since",
        )
    return since, end


async def stats_series(
    rt: Runtime, project_id: str, since: datetime, until: datetime | None, bucket: StatsBucket
) -> list[StatsBucketRow]:
    """Every bucket of [since, until) in order, those without calls included (zeros, null
    latencies), so a plot's x axis is the window; the first and last are clipped to it."""
    since, end = series_window(since, until, bucket)
    rows = await rt.reads.run(lambda conn: db_traces.series(conn, project_id, since, end, bucket.width))
    found = {r["bucket"]: r for r in rows}
    out: list[StatsBucketRow] = []
    start = _bucket_start(since, bucket)
    while start < end:
        row = found.get(start)
        out.append(_bucket_row(max(start, since), min(start + bucket.width, end), row))
        start += bucket.width
    return out


def _bucket_start(instant: datetime, bucket: StatsBucket) -> datetime:
    return _BUCKET_ORIGIN + ((instant - _BUCKET_ORIGIN) // bucket.width) * bucket.width


def _bucket_row(start: datetime, end: datetime, row: asyncpg.Record | None) -> StatsBucketRow:
    if row is None:
        return StatsBucketRow(
            start, end, 0, 0, 0, 0, 0, 0, 0,
            tuple((ReasonCode(code), 0) for code in db_traces.REASON_COLUMNS),
            tuple(PhaseLatency(TracePhase(phase), None, None) for phase in db_traces.PHASE_COLUMNS),
        )  # fmt: skip
    return StatsBucketRow(
        start=start,
        end=end,
        context_calls=int(row["calls"]),
        injected_calls=int(row["injected"]),
        empty_calls=int(row["empty"]),
        no_relevant_memory_calls=int(row["no_relevant"]),
        degraded_calls=int(row["degraded"]),
        facts_served=int(row["facts_served"]),
        used_tokens=int(row["used_tokens"]),
        reason_codes=tuple((ReasonCode(code), int(row[col])) for code, col in db_traces.REASON_COLUMNS.items()),
        latency=tuple(
            PhaseLatency(TracePhase(phase), row[col][0], row[col][1]) for phase, col in db_traces.PHASE_COLUMNS.items()
        ),
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
