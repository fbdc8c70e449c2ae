"""SQL for context traces and their decisions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol, cast

import asyncpg

from .parameters import Parameters

# Per-trace counts by reason code: stored on the trace so stats never scan decisions.
REASON_COLUMNS: dict[str, str] = {
    "TOP_SCORE": "n_top_score",
    "MULTI_HOP_EXPANSION": "n_multi_hop",
    "OVER_BUDGET": "n_over_budget",
    "BELOW_RELEVANCE_FLOOR": "n_below_floor",
    "CONFLICT_OPEN": "n_conflict_open",
    "VOLATILITY_EXPIRED": "n_volatility_expired",
    "CITED_BY_FACT": "n_cited_by_fact",
    "SOURCES_SERVED": "n_sources_served",
    "SAME_TEXT_SERVED": "n_same_text_served",
}

# The decision columns, as named by core.packet.TraceDecision's fields, with their SQL types.
_DECISION_COLUMNS = {
    "item_kind": "text",
    "item_id": "uuid",
    "chunk": "int",
    "decision": "text",
    "reason_code": "text",
    "rank": "int",
    "score": "float8",
    "similarity": "float8",
    "full_text": "float8",
    "recency": "float8",
    "distance": "float8",
    "tokens": "int",
    "via_entity": "text",
}
_DECISION_FIELDS = tuple(_DECISION_COLUMNS)
_DECISION_TYPES = ", ".join(f"{name} {kind}" for name, kind in _DECISION_COLUMNS.items())

# The channel every trace write notifies, with [project_id, trace_id, subject_id] as JSON.
TRACE_CHANNEL = "haki_traces"

_TRACE_COLUMN_NAMES = (
    "id",
    "subject_id",
    "query",
    "budget_tokens",
    "used_tokens",
    "status",
    "empty_reason",
    "warnings",
    "created_at",
    "embed_ms",
    "retrieve_ms",
    "pack_ms",
    "persist_ms",
    "total_ms",
    "facts_served",
    "episodes_served",
    "n_included",
    "n_excluded",
    "n_blocked",
    *REASON_COLUMNS.values(),
    "settings_id",
    "as_of",
)
TRACE_COLUMNS = ", ".join(_TRACE_COLUMN_NAMES)

# One statement, so one round trip and one implicit transaction: the decisions first, then
# the trace row, which records the write's own duration as the database timed it. The
# aggregate in `written` reads every row the decisions' insert returns, so the clock is read
# once they are all written. A second statement that set the duration afterwards would cost
# its round trips, BEGIN and COMMIT, and update a just-written row whose covering stats
# index holds total_ms: a dead tuple and five index entries per call (docs/performance.md).
#
# The decisions travel as one JSON array (`decisions`, orjson through the pool's json codec): as
# fourteen arrays, asyncpg checks every element against collections.abc (two or three
# isinstance calls each), which costs the event loop more (docs/performance.md).
#
# Unless `durable`, the statement's own transaction commits without waiting for its
# WAL to reach disk (set_config(..., true) lasts until that commit): visible to every
# reader at once, so trace(id) works as soon as the client has the id, and atomic as
# ever; only a crash of the database server within three wal_writer_delay periods can
# lose it, and the call does not pay for the flush (docs/performance.md). Facts and events
# always wait for it.
# The statement's parameters, by name (db/parameters.py): a value per column of the trace but
# persist_ms, which the database times (total_ms arrives without it), then the decisions and
# `durable`.
_P = Parameters("project_id", *(c for c in _TRACE_COLUMN_NAMES if c != "persist_ms"), "decisions", "durable")
_VALUES = ", ".join(
    "w.ms" if c == "persist_ms" else f"{_P.total_ms}::float8 + w.ms" if c == "total_ms" else _P[c]
    for c in _TRACE_COLUMN_NAMES
)
_INSERT = f"""
WITH decisions AS (
    INSERT INTO trace_decisions (project_id, trace_id, ord, {", ".join(_DECISION_FIELDS)})
    SELECT {_P.project_id}, {_P.id}::uuid, d.ord, {", ".join(f"d.{name}" for name in _DECISION_FIELDS)}
    FROM ROWS FROM (json_to_recordset({_P.decisions}::json) AS ({_DECISION_TYPES})) WITH ORDINALITY
         AS d({", ".join(_DECISION_FIELDS)}, ord)
    RETURNING 1
),
written AS (
    SELECT (1000 * extract(epoch FROM clock_timestamp() - statement_timestamp()))::float8 AS ms,
           CASE WHEN NOT {_P.durable}::bool THEN set_config('synchronous_commit', 'off', true) END AS commit_mode
    FROM (SELECT count(*) FROM decisions) n
)
INSERT INTO context_traces (project_id, {TRACE_COLUMNS})
SELECT {_P.project_id}, {_VALUES}
FROM written w
RETURNING persist_ms
"""

# The same write announcing the trace to every process that listens (core/serving/live.py): pg_notify in
# the statement is queued in its transaction and delivered at its commit, so a listener never
# hears of a trace it cannot read yet, and the call pays no round trip for it. The payload is
# what a listener needs to route the event and nothing more; the trace is then read as any other.
_INSERT_NOTIFY = _INSERT.replace(
    "RETURNING persist_ms",
    f"RETURNING persist_ms, pg_notify('{TRACE_CHANNEL}', json_build_array({_P.project_id}::text, {_P.id}::text, {_P.subject_id}::text)::text)",
)
_P.check(_INSERT_NOTIFY)  # at import: the text uses exactly the parameters the write binds


class _Named(Protocol):
    """An enum member, written by its value."""

    @property
    def value(self) -> str: ...


class _Timings(Protocol):
    @property
    def embed_ms(self) -> float: ...
    @property
    def retrieve_ms(self) -> float: ...
    @property
    def pack_ms(self) -> float: ...
    @property
    def total_ms(self) -> float: ...


class _Counts(Protocol):
    @property
    def included(self) -> int: ...
    @property
    def excluded(self) -> int: ...
    @property
    def blocked(self) -> int: ...


class TraceToWrite(Protocol):
    """What the write reads of a trace (core.packet.ContextTrace)."""

    @property
    def id(self) -> str: ...
    @property
    def subject_id(self) -> str: ...
    @property
    def query(self) -> str: ...
    @property
    def budget_tokens(self) -> int: ...
    @property
    def used_tokens(self) -> int: ...
    @property
    def status(self) -> _Named: ...
    @property
    def empty_reason(self) -> _Named | None: ...
    @property
    def warnings(self) -> Sequence[str]: ...
    @property
    def created_at(self) -> datetime: ...
    @property
    def timings(self) -> _Timings: ...
    @property
    def facts_served(self) -> int: ...
    @property
    def episodes_served(self) -> int: ...
    @property
    def counts(self) -> _Counts: ...
    @property
    def reason_counts(self) -> Mapping[Any, int]: ...  # by reason code (a str enum: its value is its key)
    @property
    def decisions(self) -> Sequence[Any] | None: ...  # slotted dataclasses, written by orjson
    @property
    def settings_id(self) -> str | None: ...
    @property
    def as_of(self) -> datetime | None: ...


async def insert(conn: asyncpg.Connection, project_id: str, trace: TraceToWrite, *, durable: bool = False) -> float:
    """Write a trace and its decisions in one statement (atomic).

    Returns the write's duration in ms as the database timed it (from the statement's start
    until its last decision row is written; the commit's flush and the round trip are not
    in it), which is also what the row holds as `persist_ms`, and adds to `total_ms`.
    `durable`: the commit waits for the WAL flush (see _INSERT). Listeners of TRACE_CHANNEL
    hear of it at the commit (see _INSERT_NOTIFY). Every reason code has its count: a code
    without one is a KeyError, never a count silently lost."""
    timings, counts = trace.timings, trace.counts
    values: dict[str, Any] = {
        "project_id": project_id,
        "id": trace.id,
        "subject_id": trace.subject_id,
        "query": trace.query,
        "budget_tokens": trace.budget_tokens,
        "used_tokens": trace.used_tokens,
        "status": trace.status.value,
        "empty_reason": trace.empty_reason.value if trace.empty_reason else None,
        "warnings": list(trace.warnings),
        "created_at": trace.created_at,
        "embed_ms": timings.embed_ms,
        "retrieve_ms": timings.retrieve_ms,
        "pack_ms": timings.pack_ms,
        "total_ms": timings.total_ms,
        "facts_served": trace.facts_served,
        "episodes_served": trace.episodes_served,
        "n_included": counts.included,
        "n_excluded": counts.excluded,
        "n_blocked": counts.blocked,
        **{column: trace.reason_counts[code] for code, column in REASON_COLUMNS.items()},
        "decisions": list(trace.decisions or ()),  # orjson writes a slotted dataclass as an object of its fields
        "durable": durable,
        "settings_id": trace.settings_id,
        "as_of": trace.as_of,
    }
    persist_ms = await conn.fetchval(_INSERT_NOTIFY, *_P.args(values))
    return cast(float, persist_ms)


async def get_traces(conn: asyncpg.Connection, project_id: str, ids: list[str]) -> list[asyncpg.Record | None]:
    """Trace rows by id, in the order asked; None where unknown (or of another project)."""
    rows = await conn.fetch(
        f"SELECT {TRACE_COLUMNS} FROM context_traces WHERE project_id = $1 AND id = ANY($2::uuid[])",
        project_id,
        ids,
    )
    found = {str(r["id"]): r for r in rows}
    return [found.get(i) for i in ids]


async def decisions_for(conn: asyncpg.Connection, project_id: str, trace_ids: list[str]) -> list[asyncpg.Record]:
    """Decision rows of many traces in one query, by trace then in the order they were written."""
    rows = await conn.fetch(
        f"SELECT trace_id, {', '.join(_DECISION_FIELDS)} FROM trace_decisions"
        " WHERE project_id = $1 AND trace_id = ANY($2::uuid[]) ORDER BY trace_id, ord",
        project_id,
        trace_ids,
    )
    return cast(list[asyncpg.Record], rows)


async def page_traces(
    conn: asyncpg.Connection,
    project_id: str,
    *,
    subject_id: str | None,
    since: datetime | None,
    limit: int,
    after: tuple[datetime, str] | None,
) -> list[asyncpg.Record]:
    """Traces newest first (keyset on created_at, id), optionally of one subject and since an instant."""
    rows = await conn.fetch(
        f"SELECT {TRACE_COLUMNS} FROM context_traces WHERE project_id = $1"
        " AND ($2::text IS NULL OR subject_id = $2) AND ($3::timestamptz IS NULL OR created_at >= $3)"
        " AND ($4::timestamptz IS NULL OR (created_at, id) < ($4, $5::uuid))"
        " ORDER BY created_at DESC, id DESC LIMIT $6",
        project_id,
        subject_id,
        since,
        after[0] if after else None,
        after[1] if after else None,
        limit,
    )
    return cast(list[asyncpg.Record], rows)


# One pass over the window's rows of the covering index `context_traces_stats`: integer sums
# (not avg(), which computes in numeric) and both percentiles from one sort.
STATS_SQL = f"""
SELECT count(*) AS calls,
       coalesce(sum((facts_served > 0)::int), 0) AS injected,
       coalesce(sum((facts_served = 0 AND episodes_served = 0)::int), 0) AS empty,
       coalesce(sum((empty_reason IS NOT DISTINCT FROM 'NO_RELEVANT_MEMORY')::int), 0) AS no_relevant,
       coalesce(sum((status = 'DEGRADED')::int), 0) AS degraded,
       coalesce(sum(facts_served), 0) AS facts_served,
       coalesce(sum(used_tokens), 0) AS used_tokens,
       percentile_cont(ARRAY[0.5, 0.95]) WITHIN GROUP (ORDER BY total_ms) AS latency,
       {", ".join(f"coalesce(sum({col}), 0) AS {col}" for col in REASON_COLUMNS.values())},
       (SELECT count(*) FROM facts WHERE project_id = $1 AND status = 'ACTIVE') AS active_facts,
       (SELECT count(*) FROM events WHERE project_id = $1) AS events,
       (SELECT count(*) FROM conflict_sets WHERE project_id = $1 AND status = 'OPEN') AS open_conflicts,
       (SELECT min(created_at) FROM conflict_sets WHERE project_id = $1 AND status = 'OPEN') AS oldest_open
FROM context_traces
WHERE project_id = $1 AND ($2::timestamptz IS NULL OR created_at >= $2)
"""


async def stats(conn: asyncpg.Connection, project_id: str, since: datetime | None) -> asyncpg.Record:
    """Usage figures of a project from the per-trace counts (decision rows are never scanned)."""
    return await conn.fetchrow(STATS_SQL, project_id, since)


# The phases a trace times, by column: the series' latency percentiles are taken of each.
PHASE_COLUMNS: dict[str, str] = {
    "EMBED": "embed_ms",
    "RETRIEVE": "retrieve_ms",
    "PACK": "pack_ms",
    "PERSIST": "persist_ms",
    "TOTAL": "total_ms",
}

# The stats of every bucket of a window in one pass over its rows (the stats index gives them
# in created_at order): integer sums as in STATS_SQL, and each phase's two percentiles from one
# sort per bucket. Buckets are aligned on a Monday at 00:00 UTC, so hours, days and weeks
# (Monday to Monday) all start where a person reading a UTC calendar expects.
SERIES_SQL = f"""
SELECT date_bin($4::interval, created_at, '2000-01-03T00:00:00Z') AS bucket,
       count(*) AS calls,
       sum((facts_served > 0)::int) AS injected,
       sum((facts_served = 0 AND episodes_served = 0)::int) AS empty,
       sum((empty_reason IS NOT DISTINCT FROM 'NO_RELEVANT_MEMORY')::int) AS no_relevant,
       sum((status = 'DEGRADED')::int) AS degraded,
       sum(facts_served) AS facts_served,
       sum(used_tokens) AS used_tokens,
       {", ".join(f"sum({col}) AS {col}" for col in REASON_COLUMNS.values())},
       {", ".join(f"percentile_cont(ARRAY[0.5, 0.95]) WITHIN GROUP (ORDER BY {col}) AS {col}" for col in PHASE_COLUMNS.values())}
FROM context_traces
WHERE project_id = $1 AND created_at >= $2 AND created_at < $3
GROUP BY 1
ORDER BY 1
"""


async def series(
    conn: asyncpg.Connection, project_id: str, since: datetime, until: datetime, bucket: timedelta
) -> list[asyncpg.Record]:
    """Per-bucket usage figures of [since, until), from the per-trace counts; buckets without calls are absent."""
    rows = await conn.fetch(SERIES_SQL, project_id, since, until, bucket)
    return cast(list[asyncpg.Record], rows)


async def prune_batch(conn: asyncpg.Connection, before: datetime, batch_size: int) -> int:
    """Delete up to `batch_size` traces older than `before` (any project) and their decisions.

    Short transactions on a bounded batch keep locks brief, so context calls are never blocked.
    """
    async with conn.transaction():
        rows = await conn.fetch(
            "DELETE FROM context_traces WHERE (project_id, id) IN ("
            " SELECT project_id, id FROM context_traces WHERE created_at < $1 LIMIT $2"
            " FOR UPDATE SKIP LOCKED) RETURNING project_id, id",
            before,
            batch_size,
        )
        if rows:
            await conn.execute(
                "DELETE FROM trace_decisions d USING unnest($1::text[], $2::uuid[]) AS t(p, i)"
                " WHERE d.project_id = t.p AND d.trace_id = t.i",
                [r["project_id"] for r in rows],
                [r["id"] for r in rows],
            )
    return len(rows)
