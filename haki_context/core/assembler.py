"""The context assembler: `context(subjectId, query, budget)`, step by step.

`start_assembly` is the pipeline (docs/design.md, "The assembler"):

    1 validate  2 embed  3 candidates under the hard filters (SQL)  4 score
    5 block  6 recall gate  7 pack facts  8 multi-hop  9 episodes  10 packet  11 trace

The steps overlap on purpose, in this real order: both candidates statements
(facts, episodes) are sent at once; the facts are scored, blocked, gated and
packed while the episodes' statement runs; the multi-hop statement, which needs
only the packed facts, is sent before the episodes are scored; multi-hop facts
are packed before the episodes, which take what budget is left; the trace write
is sent last and runs while the caller serializes the response.

Each rule lives in one place: the hard filters and the search plan in
db/retrieval.py (they must run inside SQL), the score in scoring.py, tokens,
lines and the decision ladder in packing.py, entities in entities.py, excerpts
in texts.py; this module decides the order.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Concatenate, ParamSpec, TypeVar

import asyncpg
import numpy as np

from ..db import as_of as db_as_of
from ..db import retrieval
from ..db import traces as db_traces
from ..settings import EpisodeRanking, Packing, Settings
from .embedder import DIMENSIONS
from .entities import entities, names, query_words
from .history import check_as_of
from .limits import check_budget, check_subject_id, clean_query
from .models import Decision, EmptyReason, ItemKind, PacketStatus, ReasonCode
from .packet import ContextPacket, ContextTrace, DecisionCounts, Episode, PacketFact, TraceDecision, TraceTimings
from .packing import Section, episode_line, fact_line, pack_merged, pack_section, render, same_text, tokens
from .runtime import Runtime
from .scoring import Components, Weights, best_neighbours, components
from .settings_records import SettingsRecord, ensure_written
from .settings_records import record_of as settings_record
from .temporal import date_cue
from .texts import served_excerpt

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(slots=True)
class _Fact:
    """A fact candidate on its way through the pipeline."""

    row: retrieval.FactRow
    parts: Components
    line: str
    tokens: int
    via_entity: str | None = None
    bonus: float = 0.0  # a named date's and neighbours' share (see _adjust), added to the hybrid score

    @property
    def score(self) -> float:
        return self.parts.score + self.bonus


@dataclass(slots=True)
class _Chunk:
    """An episode chunk candidate on its way through the pipeline."""

    row: retrieval.ChunkRow
    parts: Components
    score: float
    line: str
    tokens: int
    excerpt: str


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


async def start_assembly(
    rt: Runtime,
    project_id: str,
    subject_id: str,
    query: str,
    budget: int | None,
    *,
    as_of: datetime | None = None,
    persist: bool = True,
) -> Assembly:
    """Assemble the context packet for one subject and send its trace write, without waiting
    for it: the caller does other work (a GraphQL response's serialization) meanwhile, and
    awaits `written` before it serves the packet.

    `as_of`: the packet as it would have been assembled at that past instant, from the memory
    as it stood then (db/as_of.py: its own statements, exact scans; without it the call runs
    db/retrieval.py's, untouched). `persist=False` (a replay) writes no trace."""
    s = rt.settings
    clock = _Clock()

    # 1. Validate, and take one instant for every statement of this call.
    budget = check_budget(budget, s.max_budget)
    check_subject_id(subject_id)
    query = clean_query(query)
    now = datetime.now(UTC)
    # The statements: db/retrieval.py's, or at a past instant db/as_of.py's (read at the call, not bound once).
    facts_sql, episodes_sql, hop_sql = retrieval.fact_candidates, retrieval.episode_candidates, retrieval.multi_hop
    if as_of is not None:
        called_at, now = now, await check_as_of(rt, project_id, as_of)
        facts_sql, episodes_sql, hop_sql = db_as_of.fact_candidates, db_as_of.episode_candidates, db_as_of.multi_hop

    # 2. Embed the query (cached by text).
    with clock.embedding():
        vector = await rt.embedder.embed_query(query)

    # 3. Both candidates statements at once; everything after waits only for what it needs.
    clock.retrieval_started()
    params = search_params(
        s, project_id, subject_id, vector, query, now, own_index_tables=rt.own_indexes.tables(project_id, subject_id)
    )
    record = settings_record(s, rt.embedder)
    episode_k = episode_candidates(s, budget)
    weights = Weights.from_settings(s)
    async with _in_flight() as spawn:
        facts_task = spawn(_on_conn(rt, facts_sql, params, s.retrieval_top_k, s.blocked_trace_limit))
        episodes_task = spawn(_on_conn(rt, episodes_sql, params, episode_k, min(s.episode_text_k, episode_k)))
        found = await facts_task
        rt.own_indexes.saw(project_id, subject_id, "facts", found.own_index)

        # 4-7. Score, block, gate and pack the facts.
        with clock.deciding():
            facts = _decide_facts(found, now, weights, s, budget)
            hop_names = _hop_names(facts.section, query, s)
        # 8. Multi-hop: its statement is sent now; its rows are used once the episodes are scored.
        hop_task = None
        if hop_names:
            decided = [f.row.id for f in facts.scored] + [r.id for r in found.blocked]
            hop_task = spawn(
                _on_conn(
                    rt,
                    hop_sql,
                    params,
                    hop_names,
                    decided,
                    s.multi_hop_max_per_entity,
                    s.multi_hop_read_rows,
                )
            )
            await asyncio.sleep(0)  # the task runs up to its first wait: the statement is on the wire

        episodes_found = await episodes_task
        rt.own_indexes.saw(project_id, subject_id, "episode_chunks", episodes_found.own_index)
        with clock.deciding():
            scored_chunks = _chunks(episodes_found.chunks, now, weights, s, query)
            # One ranking: a named date and neighbours count for facts as for turns.
            pooled = facts.servable if s.packing is Packing.MERGED else []
            if _adjust(pooled, scored_chunks, query, s):
                facts = replace(facts, servable=sorted(facts.servable, key=lambda f: (-f.score, f.row.id)))
            chunks = sorted(scored_chunks, key=lambda c: (-c.score, c.row.event_id, c.row.chunk))[:episode_k]
        hop_rows = await hop_task if hop_task is not None else []

    with clock.deciding():
        gate = s.recall_max_distance
        text_of = _text if s.skip_repeated_texts else None
        if s.packing is Packing.MERGED:
            # 7+9. Facts and episodes as one ranking: the budget goes to what answers best, whatever
            # its kind, so facts cannot crowd the conversation out; multi-hop facts take what is left.
            fact_section, episodes = pack_merged(
                facts.servable,
                chunks,
                score=_score,
                cost=_cost,
                budget_left=budget,
                included=ReasonCode.TOP_SCORE,
                gated=lambda i: 0 < gate < i.parts.distance,
                cites=_sources,
                cited_as=_turn_event,
                skip_cited=s.skip_cited_turns,
                skip_restated=s.skip_restated_facts,
                text_of=text_of,
            )
            facts = replace(facts, section=fact_section)
            hops = pack_section(
                _hop_facts(hop_rows, now, weights),
                _cost,
                episodes.left,
                ReasonCode.MULTI_HOP_EXPANSION,
                text_of=text_of,
                said=_said(text_of, fact_section.kept, episodes.kept),
            )
        else:
            hops = pack_section(
                _hop_facts(hop_rows, now, weights),
                _cost,
                facts.section.left,
                ReasonCode.MULTI_HOP_EXPANSION,
                text_of=text_of,
                said=_said(text_of, facts.section.kept),
            )
            # 9. Episodes, packed into what is left of the same budget.
            served = {e for f in facts.section.kept + hops.kept for e in _sources(f)} if s.skip_cited_turns else set()
            episodes = pack_section(
                chunks,
                _cost,
                hops.left,
                ReasonCode.TOP_SCORE,
                lambda c: 0 < gate < c.parts.distance,
                lambda c: _turn_event(c) in served,
                text_of=text_of,
                said=_said(text_of, facts.section.kept, hops.kept),
            )
    clock.retrieval_ended()

    # 10-11. The packet, and its trace's write sent: the packet is served only once it has committed.
    with clock.deciding():
        trace = _trace(subject_id, query, budget, now, facts, hops, episodes, clock, record.id)
    if as_of is not None:  # the call's own instant, and the one it answered for
        trace = replace(trace, created_at=called_at, as_of=now)
    if not persist:
        return Assembly(_packet(trace, facts.section.kept, hops.kept, episodes.kept), _not_written())
    written = asyncio.ensure_future(_write(rt, project_id, trace, record))
    # Observed even when no one awaits it (a request cancelled meanwhile): no "never retrieved" log.
    written.add_done_callback(lambda w: w.cancelled() or w.exception())
    await asyncio.sleep(0)  # the write runs up to its first wait: its statement is on the wire
    return Assembly(_packet(trace, facts.section.kept, hops.kept, episodes.kept), written)


def with_write(packet: ContextPacket, persist_ms: float) -> ContextPacket:
    """`packet` with its trace's timings completed by the write's duration."""
    return replace(packet, trace=replace(packet.trace, timings=written_timings(packet.trace.timings, persist_ms)))


def written_timings(timings: TraceTimings, persist_ms: float) -> TraceTimings:
    """A trace's timings once its write took `persist_ms` (total_ms includes it, as stored)."""
    return replace(timings, persist_ms=persist_ms, total_ms=timings.total_ms + persist_ms)


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
        full_text_rank=s.full_text_rank.value,
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


# --- the steps


@dataclass
class _Clock:
    """The phases' timings of one call: embed, retrieve (the wall time from the candidates
    statements to the episodes' packing, less the time spent deciding) and pack (deciding)."""

    started: float = field(default_factory=time.perf_counter)
    embed_ms: float = 0.0
    pack_ms: float = 0.0
    retrieve_ms: float = 0.0
    _retrieval_started: float = 0.0

    @contextmanager
    def embedding(self) -> Iterator[None]:
        t = time.perf_counter()
        yield
        self.embed_ms = _ms(t)

    @contextmanager
    def deciding(self) -> Iterator[None]:
        t = time.perf_counter()
        yield
        self.pack_ms += _ms(t)

    def retrieval_started(self) -> None:
        self._retrieval_started = time.perf_counter()

    def retrieval_ended(self) -> None:
        self.retrieve_ms = _ms(self._retrieval_started) - self.pack_ms

    def timings(self) -> TraceTimings:
        return TraceTimings(self.embed_ms, self.retrieve_ms, self.pack_ms, 0.0, _ms(self.started))


@dataclass(frozen=True)
class _FactStep:
    """Steps 4-7: the scored candidates, the blocked ones' decisions, and the packed section."""

    scored: list[_Fact]
    servable: list[_Fact]  # scored, less those blocked, in rank order
    blocked: list[TraceDecision]
    expired: int  # scored candidates blocked past their volatility horizon
    blocked_total: int  # members of open conflict sets, beyond those listed
    section: Section[_Fact]


def _decide_facts(found: retrieval.FactCandidates, now: datetime, w: Weights, s: Settings, budget: int) -> _FactStep:
    """4. Score the candidates; 5. block members of OPEN conflict sets and VOLATILE/EPHEMERAL
    facts past their horizon; 6. gate by distance; 7. pack by decreasing score."""
    scored = sorted(_facts([row for row, _ in found.candidates], now, w), key=lambda f: (-f.parts.score, f.row.id))[
        : s.candidate_limit
    ]
    expired_ids = {row.id for row, expired in found.candidates if expired}
    blocked = [_blocked(row, ReasonCode.CONFLICT_OPEN) for row in found.blocked]
    blocked += [_blocked(f.row, ReasonCode.VOLATILITY_EXPIRED, f.tokens) for f in scored if f.row.id in expired_ids]
    servable = [f for f in scored if f.row.id not in expired_ids]
    gate = s.recall_max_distance
    section = pack_section(
        servable,
        _cost,
        budget,
        ReasonCode.TOP_SCORE,
        lambda f: 0 < gate < f.parts.distance,
        text_of=_text if s.skip_repeated_texts else None,
    )
    return _FactStep(scored, servable, blocked, len(scored) - len(servable), found.blocked_total, section)


def _hop_names(facts: Section[_Fact], query: str, s: Settings) -> list[str]:
    """8. The entities of the packed facts to follow one hop (full text only, never gated)."""
    if not facts.kept or facts.left <= 0 or s.multi_hop_max_entities <= 0:
        return []
    return entities((f.row.text for f in facts.kept), query, s.multi_hop_max_entities)


def _hop_facts(rows: list[tuple[str, retrieval.FactRow]], now: datetime, w: Weights) -> list[_Fact]:
    """The multi-hop candidates, in the statement's order, each fact once (its first entity)."""
    seen: set[str] = set()
    firsts = []
    for entity, row in rows:
        if row.id not in seen:
            seen.add(row.id)
            firsts.append((entity, row))
    return _facts([row for _, row in firsts], now, w, [entity for entity, _ in firsts])


def _facts(rows: list[retrieval.FactRow], now: datetime, w: Weights, via: list[str] | None = None) -> list[_Fact]:
    """Score fact rows and build their served lines."""
    out = []
    for i, row in enumerate(rows):
        dated = row.valid_from or row.recorded_at
        parts = components(row.distance or 0.0, row.full_text or 0.0, dated, now, w)
        line = fact_line(row.text, dated)
        out.append(_Fact(row=row, parts=parts, line=line, tokens=tokens(line), via_entity=via[i] if via else None))
    return out


def _chunks(rows: list[retrieval.ChunkRow], now: datetime, w: Weights, s: Settings, query: str) -> list[_Chunk]:
    """Score episode chunks and build their served lines."""
    named = query_words(query) if s.speaker_boost else frozenset()
    out = []
    for row in rows:
        p = components(row.distance, row.full_text, row.occurred_at, now, w)
        score = p.score if s.episode_ranking is EpisodeRanking.HYBRID else p.similarity
        if named and row.speaker and names(row.speaker, named):
            score += s.speaker_boost  # "what did Caroline ..." is most often answered by Caroline
        excerpt = served_excerpt(s.episode_excerpt_format, row.text, row.excerpt, row.is_turn, s.episode_excerpt_chars)
        line = episode_line(excerpt, row.occurred_at)
        out.append(_Chunk(row=row, parts=p, score=score, line=line, tokens=tokens(line), excerpt=excerpt))
    return out


def _adjust(facts: list[_Fact], chunks: list[_Chunk], query: str, s: Settings) -> bool:
    """Add to the scores of a pool of candidates (facts and chunks alike) the date bonus (an item
    dated when the query names: "what did Maria do in December 2023?") and the neighbours'
    share (`neighbour_weight` x the best other candidate dated within `neighbour_window_s`: an
    answer sits in the stretch of conversation the question is about). True when anything moved."""
    cue = date_cue(query) if s.date_boost else None
    if cue is None and not s.neighbour_weight:
        return False
    dates = [_dated(f) for f in facts] + [c.row.occurred_at for c in chunks]
    scores = np.array([f.score for f in facts] + [c.score for c in chunks])
    bonus = np.zeros(len(dates))
    if cue is not None:
        bonus += s.date_boost * np.fromiter((cue.matches(d) for d in dates), dtype=bool, count=len(dates))
    if s.neighbour_weight and len(dates) > 1:
        times = np.fromiter((d.timestamp() for d in dates), dtype=np.float64, count=len(dates))
        order = np.argsort(times, kind="stable")
        best = np.empty(len(dates))
        best[order] = best_neighbours(times[order], scores[order], s.neighbour_window_s)
        bonus += s.neighbour_weight * best
    for f, b in zip(facts, bonus[: len(facts)].tolist()):
        f.bonus += b
    for c, b in zip(chunks, bonus[len(facts) :].tolist()):
        c.score += b
    return True


def _dated(f: _Fact) -> datetime:
    return f.row.valid_from or f.row.recorded_at


def _cost(item: _Fact | _Chunk) -> int:
    return item.tokens


def _score(item: _Fact | _Chunk) -> float:
    return item.score


def _text(item: _Fact | _Chunk) -> str:
    """What an item says in the packet, without its date: a fact's text, a chunk's excerpt."""
    return item.row.text if isinstance(item, _Fact) else item.excerpt


def _said(text_of: Callable[[_Fact | _Chunk], str] | None, *served: list[_Fact] | list[_Chunk]) -> set[str]:
    """The texts of the items served by earlier sections, as packing.same_text keys (none when the rule is off)."""
    if text_of is None:
        return set()
    return {same_text(text_of(item)) for items in served for item in items}


def _sources(f: _Fact) -> tuple[str, ...]:
    """The events a fact cites as its sources."""
    return f.row.source_event_ids


def _turn_event(c: _Chunk) -> str | None:
    """The event of a turn recorded as an event of its own: a fact citing that event says what
    the turn said. A chunk of any other event (a session of many turns, a document, a long turn
    split in pieces) is never left out for a citation: a fact cites such an event for a part."""
    return c.row.event_id if c.row.whole_turn else None


def _trace(
    subject_id: str,
    query: str,
    budget: int,
    now: datetime,
    facts: _FactStep,
    hops: Section[_Fact],
    episodes: Section[_Chunk],
    clock: _Clock,
    settings_id: str,
) -> ContextTrace:
    """10. Every decision in rank order by section, and what the packet holds."""
    servable = len(facts.section.verdicts)
    decisions = (
        [_fact_decision(v.item, rank, v.decision, v.reason) for rank, v in enumerate(facts.section.verdicts, 1)]
        + [_fact_decision(v.item, rank, v.decision, v.reason) for rank, v in enumerate(hops.verdicts, servable + 1)]
        + facts.blocked
        + [_chunk_decision(v.item, rank, v.decision, v.reason) for rank, v in enumerate(episodes.verdicts, 1)]
    )
    warnings = _warnings(facts.blocked_total, facts.expired)
    kept = facts.section.kept + hops.kept
    return ContextTrace(
        id=str(uuid.uuid4()),
        subject_id=subject_id,
        query=query,
        budget_tokens=budget,
        used_tokens=sum(f.tokens for f in kept) + sum(c.tokens for c in episodes.kept),
        status=PacketStatus.DEGRADED if warnings else PacketStatus.OK,
        empty_reason=_empty_reason(decisions),
        warnings=warnings,
        created_at=now,
        timings=clock.timings(),
        counts=_counts(decisions),
        reason_counts=_reason_counts(decisions),
        facts_served=len(kept),
        episodes_served=len(episodes.kept),
        decisions=tuple(decisions),
        settings_id=settings_id,
    )


def _packet(trace: ContextTrace, kept: list[_Fact], hopped: list[_Fact], chunks: list[_Chunk]) -> ContextPacket:
    """The packet the agent reads: facts by score, then multi-hop facts, then episodes."""
    return ContextPacket(
        trace_id=trace.id,
        facts=tuple(
            [_packet_fact(f, ReasonCode.TOP_SCORE) for f in kept]
            + [_packet_fact(f, ReasonCode.MULTI_HOP_EXPANSION) for f in hopped]
        ),
        episodes=tuple(_episode(c) for c in chunks),
        warnings=trace.warnings,
        status=trace.status,
        empty_reason=trace.empty_reason,
        budget_tokens=trace.budget_tokens,
        used_tokens=trace.used_tokens,
        rendered=render([f.line for f in kept] + [f.line for f in hopped] + [c.line for c in chunks]),
        trace=trace,
    )


# --- plumbing


@asynccontextmanager
async def _in_flight() -> AsyncIterator[Callable[[Awaitable[R]], asyncio.Future[R]]]:
    """Start statements as tasks; on any error, let every one still running finish before the
    error goes on, so no connection goes back to the pool mid-query."""
    tasks: list[asyncio.Future[Any]] = []

    def spawn(statement: Awaitable[R]) -> asyncio.Future[R]:
        task = asyncio.ensure_future(statement)
        tasks.append(task)
        return task

    try:
        yield spawn
    except BaseException:
        # Every task, finished ones too: gathering retrieves their errors, which asyncio would
        # otherwise log as never retrieved.
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


async def _on_conn(
    rt: Runtime,
    statement: Callable[Concatenate[asyncpg.Connection, P], Awaitable[R]],
    *args: P.args,
    **kwargs: P.kwargs,
) -> R:
    """Run one db statement function on a pooled connection."""
    async with rt.pool.acquire() as conn:
        return await statement(conn, *args, **kwargs)


async def _write(rt: Runtime, project_id: str, trace: ContextTrace, record: SettingsRecord) -> float:
    async with rt.pool.acquire() as conn:
        await ensure_written(conn, project_id, record)  # a statement once per project and process
        return await db_traces.insert(conn, project_id, trace, durable=rt.settings.durable_traces)


def _not_written() -> asyncio.Future[float]:
    """The write of a trace that is not persisted (a replay): done at once, taking no time."""
    done: asyncio.Future[float] = asyncio.get_running_loop().create_future()
    done.set_result(0.0)
    return done


def _ms(since: float) -> float:
    return (time.perf_counter() - since) * 1000.0


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
        score=f.score,
        similarity=f.parts.similarity,
        full_text=f.parts.full_text,
        recency=f.parts.recency,
        distance=f.parts.distance,
        tokens=f.tokens,
        via_entity=f.via_entity,
    )


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
        score=f.score,
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


def _empty_reason(decisions: list[TraceDecision]) -> EmptyReason | None:
    """Why nothing was served, when nothing was: the subject held nothing to consider
    (NO_MEMORY), items fit for the query were found but none fit the budget (BUDGET_TOO_SMALL),
    or the recall gate set every candidate aside (NO_RELEVANT_MEMORY). None when something was
    served, or when every candidate was blocked (the warnings say so)."""
    if any(d.decision is Decision.INCLUDED for d in decisions):
        return None
    if not decisions:
        return EmptyReason.NO_MEMORY
    if any(d.reason_code is ReasonCode.OVER_BUDGET for d in decisions):
        return EmptyReason.BUDGET_TOO_SMALL
    if any(d.reason_code is ReasonCode.BELOW_RELEVANCE_FLOOR for d in decisions):
        return EmptyReason.NO_RELEVANT_MEMORY
    return None


def _counts(decisions: list[TraceDecision]) -> DecisionCounts:
    return DecisionCounts(
        included=sum(d.decision is Decision.INCLUDED for d in decisions),
        excluded=sum(d.decision is Decision.EXCLUDED for d in decisions),
        blocked=sum(d.decision is Decision.BLOCKED for d in decisions),
    )


def _reason_counts(decisions: list[TraceDecision]) -> dict[ReasonCode, int]:
    counts = {code: 0 for code in ReasonCode}
    for d in decisions:
        counts[d.reason_code] += 1
    return counts
