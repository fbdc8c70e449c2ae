"""Reading persisted traces back."""

from __future__ import annotations

import asyncpg

from ..db import traces as db_traces
from .limits import try_parse_id
from .models import Decision, EmptyReason, ItemKind, PacketStatus, ReasonCode
from .packet import ContextTrace, DecisionCounts, TraceDecision, TraceTimings
from .runtime import Runtime


def trace_from_row(row: asyncpg.Record) -> ContextTrace:
    return ContextTrace(
        id=str(row["id"]),
        subject_id=row["subject_id"],
        query=row["query"],
        budget_tokens=row["budget_tokens"],
        used_tokens=row["used_tokens"],
        status=PacketStatus(row["status"]),
        empty_reason=EmptyReason(row["empty_reason"]) if row["empty_reason"] else None,
        warnings=tuple(row["warnings"]),
        created_at=row["created_at"],
        timings=TraceTimings(row["embed_ms"], row["retrieve_ms"], row["pack_ms"], row["persist_ms"], row["total_ms"]),
        counts=DecisionCounts(row["n_included"], row["n_excluded"], row["n_blocked"]),
        reason_counts={ReasonCode(code): row[col] for code, col in db_traces.REASON_COLUMNS.items()},
        facts_served=row["facts_served"],
        episodes_served=row["episodes_served"],
    )


def decision_from_row(row: asyncpg.Record) -> TraceDecision:
    return TraceDecision(
        item_kind=ItemKind(row["item_kind"]),
        item_id=str(row["item_id"]),
        chunk=row["chunk"],
        decision=Decision(row["decision"]),
        reason_code=ReasonCode(row["reason_code"]),
        rank=row["rank"],
        score=row["score"],
        similarity=row["similarity"],
        full_text=row["full_text"],
        recency=row["recency"],
        distance=row["distance"],
        tokens=row["tokens"],
        via_entity=row["via_entity"],
    )


async def traces_by_id(rt: Runtime, project_id: str, ids: list[str]) -> list[ContextTrace | None]:
    """Traces by id, in the order asked; None where unknown, malformed or of another project."""
    valid = sorted({p for p in (try_parse_id(i) for i in ids) if p is not None})
    if not valid:
        return [None] * len(ids)
    async with rt.pool.acquire() as conn:
        rows = await db_traces.get_traces(conn, project_id, valid)
    found = {str(r["id"]): trace_from_row(r) for r in rows}
    return [found.get(try_parse_id(i) or "") for i in ids]


async def decisions_by_trace(rt: Runtime, project_id: str, trace_ids: list[str]) -> list[list[TraceDecision]]:
    """The decisions of each trace, in written (rank) order; one query for all."""
    async with rt.pool.acquire() as conn:
        rows = await db_traces.decisions_for(conn, project_id, trace_ids)
    out: dict[str, list[TraceDecision]] = {t: [] for t in trace_ids}
    for r in rows:
        out[str(r["trace_id"])].append(decision_from_row(r))
    return [out[t] for t in trace_ids]
