"""The context assembler: `context(subjectId, query, budget)`, step by step.

Read top to bottom, this module is the pipeline of DESIGN.md "The assembler":

    1 validate  2 embed  3-4 candidates (phase 1 under the hard filters, phase 2 scoring)
    5 block  6 recall gate  7 pack  8 multi-hop  9 episodes  10 packet  11 trace

Each rule lives in one place: the hard filters and the search plan in
db/retrieval.py (they must run inside SQL), the score in scoring.py, tokens and
lines in packing.py, entities in entities.py; this module decides.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

import asyncpg
import numpy as np

from ..db import retrieval
from ..db import traces as db_traces
from ..settings import Settings
from .embedder import DIMENSIONS
from .entities import entities, names, query_words
from .limits import check_budget, check_subject_id, clean_query
from .models import Decision, EmptyReason, ItemKind, PacketStatus, ReasonCode
from .packet import (
    ContextPacket,
    ContextTrace,
    DecisionCounts,
    Episode,
    PacketFact,
    TraceDecision,
    TraceTimings,
)
from .packing import episode_line, fact_line, pack, render, tokens
from .runtime import Runtime
from .scoring import Components, Weights, score_pool
from .texts import served_excerpt

DEFAULT_BUDGET = 900


@dataclass(slots=True)
class _Fact:
    """A fact candidate on its way through the pipeline."""

    row: retrieval.FactRow
    parts: Components
    line: str
    tokens: int
    via_entity: str | None = None


@dataclass(slots=True)
class _Chunk:
    row: retrieval.ChunkRow
    parts: Components
    score: float
    line: str
    tokens: int
    excerpt: str


@dataclass
class _Decisions:
    """The trace being built: decisions in rank order, by section."""

    facts: list[TraceDecision] = field(default_factory=list)
    multi_hop: list[TraceDecision] = field(default_factory=list)
    blocked: list[TraceDecision] = field(default_factory=list)
    episodes: list[TraceDecision] = field(default_factory=list)

    def all(self) -> tuple[TraceDecision, ...]:
        return tuple(self.facts + self.multi_hop + self.blocked + self.episodes)


@dataclass(frozen=True)
class Assembly:
    """A context packet whose trace is being written. `written` ends with the write's duration
    (ms) once its transaction has committed, or with the write's error: the packet may be
    served only after it ended well (a packet is never served without its trace)."""

    packet: ContextPacket  # its trace's persist_ms is 0 and total_ms lacks the write: see with_write
    written: asyncio.Future[float]


async def assemble(rt: Runtime, project_id: str, subject_id: str, query: str, budget: int | None) -> ContextPacket:
    """Assemble the context packet for one subject, and persist its trace before returning it."""
    assembly = await start_assembly(rt, project_id, subject_id, query, budget)
    return with_write(assembly.packet, await assembly.written)


async def start_assembly(rt: Runtime, project_id: str, subject_id: str, query: str, budget: int | None) -> Assembly:
    """Assemble the context packet for one subject and send its trace write, without waiting
    for it: the caller does other work (a GraphQL response's serialization) meanwhile, and
    awaits `written` before it serves the packet."""
    s = rt.settings
    started = time.perf_counter()

    # 1. Validate.
    budget = check_budget(budget, DEFAULT_BUDGET, s.max_budget)
    check_subject_id(subject_id)
    query = clean_query(query)
    now = datetime.now(UTC)  # one instant for every statement of this call

    # 2. Embed the query once (cached by text).
    t = time.perf_counter()
    vector = await rt.embedder.embed_query(query)
    embed_ms = _ms(t)

    # 3-4. Candidates under the hard filters, scored on the union only; episodes alongside.
    # The statements run concurrently, and the Python work on each result (scoring, packing,
    # the multi-hop statement that depends on the packed facts) starts as soon as that result
    # is in: retrieve_ms is the wall time of steps 3-9 less pack_ms, the time spent deciding.
    retrieval_started = time.perf_counter()
    params = search_params(
        s, project_id, subject_id, vector, query, now, own_index_tables=rt.own_indexes.tables(project_id, subject_id)
    )
    episode_k = episode_candidates(s, budget)
    facts_task = asyncio.ensure_future(
        _with_conn(rt, retrieval.fact_candidates, params, s.retrieval_top_k, s.blocked_trace_limit)
    )
    episodes_task = asyncio.ensure_future(
        _with_conn(rt, retrieval.episode_candidates, params, episode_k, min(s.episode_text_k, episode_k))
    )
    hop_task: asyncio.Future[list[tuple[str, retrieval.FactRow]]] | None = None
    try:
        found = await facts_task
        rt.own_indexes.saw(project_id, subject_id, "facts", found.own_index)

        t = time.perf_counter()
        weights = Weights.from_settings(s)
        decisions = _Decisions()
        scored = sorted(
            _facts([row for row, _ in found.candidates], now, weights, s.fusion),
            key=lambda f: (-f.parts.score, f.row.id),
        )[: s.candidate_limit]
        expired_ids = {row.id for row, expired in found.candidates if expired}

        # 5. Block: members of OPEN conflict sets, and VOLATILE/EPHEMERAL candidates past their horizon.
        for row in found.blocked:
            decisions.blocked.append(_blocked(row, ReasonCode.CONFLICT_OPEN))
        servable: list[_Fact] = []
        for f in scored:
            if f.row.id in expired_ids:
                decisions.blocked.append(_blocked(f.row, ReasonCode.VOLATILITY_EXPIRED, f.tokens))
            else:
                servable.append(f)

        # 6. Recall gate: beyond the distance, excluded whatever budget remains.
        gate = s.recall_max_distance
        gated: set[str] = set()
        if gate > 0:
            gated = {f.row.id for f in servable if f.parts.distance > gate}

        # 7. Pack facts by decreasing score.
        eligible = [f for f in servable if f.row.id not in gated]
        kept, _over, left = pack(eligible, lambda f: f.tokens, budget)

        # 8. Multi-hop: one hop through entities of the kept facts, full text only, never gated.
        # Its statement is sent now (the task runs up to its first wait at the yield below);
        # its rows are used after the episodes are scored.
        if kept and left > 0 and s.multi_hop_max_entities > 0:
            hop_names = entities((f.row.text for f in kept), query, s.multi_hop_max_entities)
            if hop_names:
                decided = [f.row.id for f in scored] + [r.id for r in found.blocked]
                hop_task = asyncio.ensure_future(
                    _with_conn(
                        rt,
                        retrieval.multi_hop,
                        params,
                        hop_names,
                        decided,
                        s.multi_hop_max_per_entity,
                        s.multi_hop_read_rows,
                    )
                )
                await asyncio.sleep(0)

        kept_ids = {f.row.id for f in kept}
        for rank, f in enumerate(servable, start=1):
            if f.row.id in gated:
                decision, reason = Decision.EXCLUDED, ReasonCode.BELOW_RELEVANCE_FLOOR
            elif f.row.id in kept_ids:
                decision, reason = Decision.INCLUDED, ReasonCode.TOP_SCORE
            else:
                decision, reason = Decision.EXCLUDED, ReasonCode.OVER_BUDGET
            decisions.facts.append(_fact_decision(f, rank, decision, reason))
        pack_ms = _ms(t)

        episodes = await episodes_task
        rt.own_indexes.saw(project_id, subject_id, "episode_chunks", episodes.own_index)
        t = time.perf_counter()
        chunks = sorted(
            _chunks(episodes.chunks, now, weights, s, query),
            key=lambda c: (-c.score, c.row.event_id, c.row.chunk),
        )[:episode_k]
        pack_ms += _ms(t)

        hopped: list[_Fact] = []
        if hop_task is not None:
            rows = await hop_task
            t = time.perf_counter()
            seen: set[str] = set()
            firsts = []
            for entity, row in rows:
                if row.id not in seen:
                    seen.add(row.id)
                    firsts.append((entity, row))
            candidates = _facts([row for _, row in firsts], now, weights, s.fusion, [e for e, _ in firsts])
            hopped, _, left = pack(candidates, lambda f: f.tokens, left)
            hopped_ids = {f.row.id for f in hopped}
            for rank, f in enumerate(candidates, start=len(servable) + 1):
                if f.row.id in hopped_ids:
                    decision, reason = Decision.INCLUDED, ReasonCode.MULTI_HOP_EXPANSION
                else:
                    decision, reason = Decision.EXCLUDED, ReasonCode.OVER_BUDGET
                decisions.multi_hop.append(_fact_decision(f, rank, decision, reason))
            pack_ms += _ms(t)
    except BaseException:
        # Let every statement still running finish, so no connection goes back mid-query.
        pending = [task for task in (facts_task, episodes_task, hop_task) if task is not None and not task.done()]
        await asyncio.gather(*pending, return_exceptions=True)
        raise

    # 9. Episodes, packed into what is left of the same budget.
    t = time.perf_counter()
    gated_chunks = {(c.row.event_id, c.row.chunk) for c in chunks if gate > 0 and c.parts.distance > gate}
    kept_chunks, _, left = pack(
        [c for c in chunks if (c.row.event_id, c.row.chunk) not in gated_chunks], lambda c: c.tokens, left
    )
    kept_chunk_keys = {(c.row.event_id, c.row.chunk) for c in kept_chunks}
    for rank, c in enumerate(chunks, start=1):
        key = (c.row.event_id, c.row.chunk)
        if key in gated_chunks:
            decision, reason = Decision.EXCLUDED, ReasonCode.BELOW_RELEVANCE_FLOOR
        elif key in kept_chunk_keys:
            decision, reason = Decision.INCLUDED, ReasonCode.TOP_SCORE
        else:
            decision, reason = Decision.EXCLUDED, ReasonCode.OVER_BUDGET
        decisions.episodes.append(_chunk_decision(c, rank, decision, reason))
    pack_ms += _ms(t)
    retrieve_ms = _ms(retrieval_started) - pack_ms

    # 10. The packet.
    t = time.perf_counter()
    packet_facts = tuple(
        [_packet_fact(f, ReasonCode.TOP_SCORE) for f in kept]
        + [_packet_fact(f, ReasonCode.MULTI_HOP_EXPANSION) for f in hopped]
    )
    episodes = tuple(_episode(c) for c in kept_chunks)
    warnings = _warnings(found.blocked_total, len(expired_ids & {f.row.id for f in scored}))
    considered = len(servable) + len(chunks)
    gated_all = len(gated) + len(gated_chunks)
    empty_reason = (
        EmptyReason.NO_RELEVANT_MEMORY
        if gate > 0 and considered > 0 and gated_all == considered and not packet_facts and not episodes
        else None
    )
    used = sum(f.tokens for f in kept) + sum(f.tokens for f in hopped) + sum(c.tokens for c in kept_chunks)
    rendered = render([f.line for f in kept] + [f.line for f in hopped] + [c.line for c in kept_chunks])
    pack_ms += _ms(t)

    # 11. The trace: its write is sent now, and the packet is served only once it has committed
    # (`assemble` waits for it; the GraphQL layer serializes the response meanwhile).
    all_decisions = decisions.all()
    trace = ContextTrace(
        id=str(uuid.uuid4()),
        subject_id=subject_id,
        query=query,
        budget_tokens=budget,
        used_tokens=used,
        status=PacketStatus.DEGRADED if warnings else PacketStatus.OK,
        empty_reason=empty_reason,
        warnings=warnings,
        created_at=now,
        timings=TraceTimings(embed_ms, retrieve_ms, pack_ms, 0.0, _ms(started)),
        counts=_counts(all_decisions),
        reason_counts=_reason_counts(all_decisions),
        facts_served=len(packet_facts),
        episodes_served=len(episodes),
        decisions=all_decisions,
    )
    written = asyncio.ensure_future(_write(rt, project_id, trace))
    # Observed even when no one awaits it (a request cancelled meanwhile): no "never retrieved" log.
    written.add_done_callback(lambda w: w.cancelled() or w.exception())
    await asyncio.sleep(0)  # the write runs up to its first wait: its statement is on the wire
    packet = ContextPacket(
        trace_id=trace.id,
        facts=packet_facts,
        episodes=episodes,
        warnings=warnings,
        status=trace.status,
        empty_reason=empty_reason,
        budget_tokens=budget,
        used_tokens=used,
        rendered=rendered,
        trace=trace,
    )
    return Assembly(packet, written)


def with_write(packet: ContextPacket, persist_ms: float) -> ContextPacket:
    """`packet` with its trace's timings completed by the write's duration."""
    return replace(packet, trace=replace(packet.trace, timings=written_timings(packet.trace.timings, persist_ms)))


def written_timings(timings: TraceTimings, persist_ms: float) -> TraceTimings:
    """A trace's timings once its write took `persist_ms` (total_ms includes it, as stored)."""
    return replace(timings, persist_ms=persist_ms, total_ms=timings.total_ms + persist_ms)


# --- helpers, in the order the pipeline uses them


def episode_candidates(s: Settings, budget: int) -> int:
    """How many episode chunks to consider: more for a bigger budget, within the settings' bounds."""
    return max(s.episode_top_k, min(s.episode_max_k, budget // s.episode_budget_per_candidate))


def search_params(
    s: Settings,
    project_id: str,
    subject_id: str,
    vector: np.ndarray,
    query: str,
    now: datetime,
    *,
    own_index_tables: frozenset[str] = frozenset(),
) -> retrieval.SearchParams:
    """What every retrieval statement of one call shares (benchmarks build the same);
    `own_index_tables` from Runtime.own_indexes."""
    return retrieval.SearchParams(
        project_id=project_id,
        subject_id=subject_id,
        vector=vector,
        query=query,
        now=now,
        max_lexemes=s.max_query_lexemes,
        lexeme_rows=s.full_text_lexeme_rows,
        use_scope_index=True,
        hnsw_fetch=s.hnsw_fetch_rows,
        horizon_volatile_s=s.horizon_volatile_days * 86400.0,
        horizon_ephemeral_s=s.horizon_ephemeral_days * 86400.0,
        full_text_rank=s.full_text_rank,
        own_index_tables=own_index_tables,
    )


async def warm_connections(pool: asyncpg.Pool, s: Settings) -> None:
    """Plan the retrieval statements on the pool's `pool_min_size` connections (db/retrieval.warm),
    held at once so that they are different ones: the first calls after a start find them planned."""
    vector = np.full(DIMENSIONS, DIMENSIONS**-0.5, dtype=np.float32)  # any unit vector
    params = search_params(s, "", "", vector, "warm up", datetime.now(UTC))
    conns = []
    try:
        for _ in range(s.pool_min_size):
            conns.append(await pool.acquire())
        for conn in conns:
            await retrieval.warm(conn, params)
    finally:
        for conn in conns:
            await pool.release(conn)


async def _write(rt: Runtime, project_id: str, trace: ContextTrace) -> float:
    async with rt.pool.acquire() as conn:
        return await db_traces.insert(conn, project_id, trace, durable=rt.settings.durable_traces)


async def _with_conn(rt: Runtime, fn, *args):  # type: ignore[no-untyped-def]
    async with rt.pool.acquire() as conn:
        return await fn(conn, *args)


def _ms(since: float) -> float:
    return (time.perf_counter() - since) * 1000.0


def _facts(
    rows: list[retrieval.FactRow], now: datetime, w: Weights, fusion: str, via: list[str] | None = None
) -> list[_Fact]:
    """Score one pool of fact rows (fusion may normalise over the pool) and build their lines."""
    dated = [row.valid_from or row.recorded_at for row in rows]
    parts = score_pool([(r.distance or 0.0, r.full_text or 0.0, d) for r, d in zip(rows, dated)], now, w, fusion)
    out = []
    for i, (row, p, at) in enumerate(zip(rows, parts, dated)):
        line = fact_line(row.text, at)
        out.append(_Fact(row=row, parts=p, line=line, tokens=tokens(line), via_entity=via[i] if via else None))
    return out


def _blocked(row: retrieval.FactRow, reason: ReasonCode, item_tokens: int | None = None) -> TraceDecision:
    line_tokens = (
        item_tokens if item_tokens is not None else tokens(fact_line(row.text, row.valid_from or row.recorded_at))
    )
    return TraceDecision(
        item_kind=ItemKind.FACT,
        item_id=row.id,
        chunk=None,
        decision=Decision.BLOCKED,
        reason_code=reason,
        rank=None,
        score=None,
        similarity=None if row.distance is None else 1.0 - row.distance,
        full_text=row.full_text,
        recency=None,
        distance=row.distance,
        tokens=line_tokens,
    )


def _fact_decision(f: _Fact, rank: int, decision: Decision, reason: ReasonCode) -> TraceDecision:
    return TraceDecision(
        item_kind=ItemKind.FACT,
        item_id=f.row.id,
        chunk=None,
        decision=decision,
        reason_code=reason,
        rank=rank,
        score=f.parts.score,
        similarity=f.parts.similarity,
        full_text=f.parts.full_text,
        recency=f.parts.recency,
        distance=f.parts.distance,
        tokens=f.tokens,
        via_entity=f.via_entity,
    )


def _chunks(rows: list[retrieval.ChunkRow], now: datetime, w: Weights, s: Settings, query: str) -> list[_Chunk]:
    """Score one pool of episode chunks and build their served lines."""
    parts = score_pool([(r.distance, r.full_text, r.occurred_at) for r in rows], now, w, s.fusion)
    named = query_words(query) if s.speaker_boost else frozenset()
    out = []
    for row, p in zip(rows, parts):
        # The seed ranks episodes by cosine similarity alone; "hybrid" ranks them like facts.
        score = p.score if s.episode_ranking == "hybrid" else p.similarity
        if named and row.speaker and names(row.speaker, named):
            score += s.speaker_boost  # "what did Caroline ..." is most often answered by Caroline
        excerpt = served_excerpt(s.episode_excerpt_format, row.text, row.excerpt, row.is_turn, s.episode_excerpt_chars)
        line = episode_line(excerpt, row.occurred_at)
        out.append(_Chunk(row=row, parts=p, score=score, line=line, tokens=tokens(line), excerpt=excerpt))
    return out


def _chunk_decision(c: _Chunk, rank: int, decision: Decision, reason: ReasonCode) -> TraceDecision:
    return TraceDecision(
        item_kind=ItemKind.EPISODE,
        item_id=c.row.event_id,
        chunk=c.row.chunk,
        decision=decision,
        reason_code=reason,
        rank=rank,
        score=c.score,
        similarity=c.parts.similarity,
        full_text=c.parts.full_text,
        recency=c.parts.recency,
        distance=c.parts.distance,
        tokens=c.tokens,
    )


def _packet_fact(f: _Fact, reason: ReasonCode) -> PacketFact:
    r = f.row
    return PacketFact(
        id=r.id,
        predicate=r.predicate,
        value=r.value,
        confidence=r.confidence,
        valid_from=r.valid_from,
        valid_to=r.valid_to,
        source_event_ids=r.source_event_ids,
        score=f.parts.score,
        tokens=f.tokens,
        reason_code=reason,
        via_entity=f.via_entity,
    )


def _episode(c: _Chunk) -> Episode:
    r = c.row
    return Episode(r.event_id, r.chunk, r.kind, r.occurred_at, c.excerpt, c.score, c.tokens)


def _warnings(open_conflict: int, expired: int) -> tuple[str, ...]:
    out = []
    if open_conflict:
        out.append(f"open_conflict: {open_conflict} fact(s) hidden pending conflict resolution")
    if expired:
        out.append(f"volatility_expired: {expired} fact(s) hidden past their volatility horizon")
    return tuple(out)


def _counts(decisions: tuple[TraceDecision, ...]) -> DecisionCounts:
    return DecisionCounts(
        included=sum(d.decision is Decision.INCLUDED for d in decisions),
        excluded=sum(d.decision is Decision.EXCLUDED for d in decisions),
        blocked=sum(d.decision is Decision.BLOCKED for d in decisions),
    )


def _reason_counts(decisions: tuple[TraceDecision, ...]) -> dict[ReasonCode, int]:
    counts = {code: 0 for code in ReasonCode}
    for d in decisions:
        counts[d.reason_code] += 1
    return counts
