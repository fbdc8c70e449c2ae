"""The context pipeline: `context(subjectId, query, budget)` as its stages.

`start_assembly` calls the stages in order (docs/design.md, "The assembler"):

    understand     validate the call, take its instant and statements, embed the query
    gather         send the candidates statements (facts, episodes) at once
    decide_facts   score the facts, block, gate and pack them
    (multi-hop)    send the one-hop statement for the packed facts' names
    rank_episodes  score the episode chunks, add the cues, rank
    pack           pack facts and episodes (one ranking, or sections) and the multi-hop facts
    trace, packet  every decision and what the packet holds
    TraceWrite     send the trace's write; the packet is served once it has committed

The statements overlap on purpose: both candidates statements are on the wire together; the
facts are decided while the episodes' statement runs; the multi-hop statement, which needs only
the packed facts, is sent before the episodes are ranked; the trace write runs while the caller
serializes the response.

Each rule lives in one place: the hard filters and the search plan in db/retrieval.py (live)
and db/as_of.py (at a past instant; they must run inside SQL), the score and the recall gate in
scoring.py, tokens, lines, a fact's date and the decision ladder in packing.py, entities in
entities.py, excerpts in texts.py; this module decides the order.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, TypeVar

import asyncpg
import numpy as np

from ...db import as_of as db_as_of
from ...db import retrieval
from ...settings import EpisodeRanking, Packing, Settings, Tokenizer
from ..embedding.embedder import DIMENSIONS
from ..limits import check_budget, check_subject_id, clean_query
from ..models import Decision, EmptyReason, ItemKind, PacketStatus, ReasonCode
from ..packet import ContextPacket, ContextTrace, DecisionCounts, Episode, PacketFact, TraceDecision, TraceTimings
from ..serving.runtime import Runtime
from ..texts import served_excerpt
from .entities import entities, names, query_words
from .instants import check_as_of
from .packing import (
    Section,
    episode_line,
    fact_date,
    fact_line,
    pack_merged,
    pack_section,
    render_packet,
    same_text,
)
from .scoring import Components, Weights, best_neighbours, components, past_recall_gate
from .settings_records import SettingsRecord
from .settings_records import record_of as settings_record
from .temporal import date_cue
from .token_counts import counter_loaded, with_tokenizer
from .trace_write import TraceWrite

R = TypeVar("R")


@dataclass(frozen=True)
class Assembly:
    """A context packet and the write of its trace: the packet may be served only once
    `write.committed()` has ended well (a packet is never served without its trace)."""

    packet: ContextPacket  # its trace's persist_ms is 0 and total_ms lacks the write: see written_timings
    write: TraceWrite


async def start_assembly(
    rt: Runtime,
    project_id: str,
    subject_id: str,
    query: str,
    budget: int | None,
    *,
    as_of: datetime | None = None,
    tokenizer: Tokenizer | None = None,
    persist: bool = True,
) -> Assembly:
    """Assemble the context packet for one subject and send its trace write, without waiting
    for it: the caller does other work (a GraphQL response's serialization) meanwhile, and
    awaits `write.committed()` before it serves the packet.

    `as_of`: the packet as it would have been assembled at that past instant, from the memory
    as it stood then (db/as_of.py's statements; without it db/retrieval.py's, untouched).
    `persist=False` (a replay) writes no trace."""
    clock = _Clock()
    call = await understand(
        rt,
        project_id=project_id,
        subject_id=subject_id,
        query=query,
        budget=budget,
        as_of=as_of,
        tokenizer=tokenizer,
        clock=clock,
    )
    clock.retrieval_started()
    async with _in_flight() as spawn:
        gathering = Gathering(rt, call, spawn)
        found = await gathering.facts()
        with clock.deciding():
            decided = decide_facts(found, call)
            hop_names = _hop_names(decided.section, call)
        await gathering.send_multi_hop(hop_names, decided=decided.decided_ids(found))
        episodes_found = await gathering.episodes()
        with clock.deciding():
            facts, chunks = rank_episodes(episodes_found, decided, call)
        hop_rows = await gathering.multi_hop_rows()
    with clock.deciding():
        packed = pack(call, facts, chunks, hop_rows)
    clock.retrieval_ended()
    with clock.deciding():
        trace = trace_of(call, facts, packed, clock)
    packet = packet_of(trace, packed)
    if not persist:
        return Assembly(packet, TraceWrite.skipped())
    return Assembly(packet, await TraceWrite.start(rt, project_id=project_id, trace=trace, record=call.record))


def written_timings(timings: TraceTimings, persist_ms: float) -> TraceTimings:
    """A trace's timings once its write took `persist_ms` (total_ms includes it, as stored)."""
    return replace(timings, persist_ms=persist_ms, total_ms=timings.total_ms + persist_ms)


def episode_candidates(s: Settings, budget: int) -> int:
    """How many episode chunks to consider: more for a bigger budget, within the settings' bounds."""
    return max(s.episode_top_k, min(s.episode_max_k, budget // s.episode_budget_per_candidate))


def search_params(
    s: Settings,
    *,
    project_id: str,
    subject_id: str,
    vector: np.ndarray,
    query: str,
    now: datetime,
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
    params = search_params(s, project_id="", subject_id="", vector=vector, query="warm up", now=datetime.now(UTC))
    conns = []
    try:
        for _ in range(s.pool_min_size):
            conns.append(await pool.acquire())
        for conn in conns:
            await retrieval.warm(conn, params)
    finally:
        for conn in conns:
            await pool.release(conn)


# --- stage 1: understand the call


@dataclass(frozen=True)
class Call:
    """One call, understood: what it asks, validated; the instant its statements use; the set of
    statements it runs (live, or at a past instant: chosen here, once); its settings."""

    project_id: str
    subject_id: str
    query: str
    budget: int
    called_at: datetime  # the call's own instant
    now: datetime  # the instant its statements answer for: called_at, or asOf
    as_of: datetime | None
    statements: retrieval.CandidateStatements
    params: retrieval.SearchParams
    settings: Settings
    weights: Weights
    episode_k: int
    record: SettingsRecord  # the settings record the call runs under
    count_tokens: Callable[[str], int]  # what a served line costs, in the settings' tokenizer


async def understand(
    rt: Runtime,
    *,
    project_id: str,
    subject_id: str,
    query: str,
    budget: int | None,
    as_of: datetime | None,
    tokenizer: Tokenizer | None,
    clock: _Clock,
) -> Call:
    """Validate the call, take one instant for every statement of it, choose its statements and
    embed its query (cached by text). A call that names a tokenizer runs under the server's
    settings counting in it (and is recorded so)."""
    s = with_tokenizer(rt.settings, tokenizer)
    budget = check_budget(budget, s.max_budget)
    check_subject_id(subject_id)
    query = clean_query(query)
    called_at = datetime.now(UTC)
    now = called_at if as_of is None else await check_as_of(rt, project_id, as_of)
    with clock.embedding():
        # A call alone in the process encodes on the loop's thread: the hop to the worker thread
        # costs more than it saves when no other call waits for the loop.
        alone = rt.admission.in_use <= 1 and not rt.admission.waiting
        vector = await rt.embedder.embed_query(query, inline=alone)
    own_index_tables = rt.own_indexes.tables(project_id, subject_id)
    return Call(
        project_id=project_id,
        subject_id=subject_id,
        query=query,
        budget=budget,
        called_at=called_at,
        now=now,
        as_of=None if as_of is None else now,
        statements=retrieval.LIVE if as_of is None else db_as_of.AT_INSTANT,
        params=search_params(
            s,
            project_id=project_id,
            subject_id=subject_id,
            vector=vector,
            query=query,
            now=now,
            own_index_tables=own_index_tables,
        ),
        settings=s,
        weights=Weights.from_settings(s),
        episode_k=episode_candidates(s, budget),
        count_tokens=await counter_loaded(s.tokenizer),
        record=settings_record(s, rt.embedder),
    )


# --- stage 2: gather the candidates


class Gathering:
    """The call's statements on pooled connections: the two candidates statements sent at once
    when made, the multi-hop one when the packed facts name entities; each result awaited where
    it is needed."""

    def __init__(self, rt: Runtime, call: Call, spawn: Callable[[Awaitable[Any]], asyncio.Future[Any]]) -> None:
        self.rt, self.call, self.spawn = rt, call, spawn
        s, statements, p = call.settings, call.statements, call.params
        self._facts: asyncio.Future[retrieval.FactCandidates] = spawn(
            self._on_conn(lambda conn: statements.fact_candidates(conn, p, s.retrieval_top_k, s.blocked_trace_limit))
        )
        text_k = min(s.episode_text_k, call.episode_k)
        self._episodes: asyncio.Future[retrieval.EpisodeCandidates] = spawn(
            self._on_conn(lambda conn: statements.episode_candidates(conn, p, call.episode_k, text_k))
        )
        self._hops: asyncio.Future[list[tuple[str, retrieval.FactRow]]] | None = None

    async def facts(self) -> retrieval.FactCandidates:
        """The fact candidates and the blocked facts (the scope's own-index hint noted)."""
        found = await self._facts
        self.rt.own_indexes.saw(self.call.project_id, self.call.subject_id, "facts", found.own_index)
        return found

    async def send_multi_hop(self, entity_names: list[str], *, decided: list[str]) -> None:
        """Send the one-hop statement for `entity_names` (nothing when there are none), leaving
        out the facts `decided` already; return once it is on the wire."""
        if not entity_names:
            return
        s, statements, p = self.call.settings, self.call.statements, self.call.params
        self._hops = self.spawn(
            self._on_conn(
                lambda conn: statements.multi_hop(
                    conn,
                    p,
                    entity_names,
                    exclude_ids=decided,
                    per_entity=s.multi_hop_max_per_entity,
                    read_rows=s.multi_hop_read_rows,
                )
            )
        )
        await asyncio.sleep(0)  # the task runs up to its first wait: the statement is on the wire

    async def episodes(self) -> retrieval.EpisodeCandidates:
        """The episode chunk candidates (the scope's own-index hint noted)."""
        found = await self._episodes
        self.rt.own_indexes.saw(self.call.project_id, self.call.subject_id, "episode_chunks", found.own_index)
        return found

    async def multi_hop_rows(self) -> list[tuple[str, retrieval.FactRow]]:
        """The one-hop statement's rows; none when it was not sent."""
        return await self._hops if self._hops is not None else []

    async def _on_conn(self, statement: Callable[[asyncpg.Connection], Awaitable[R]]) -> R:
        return await self.rt.reads.run(statement)


# --- stage 3: decide the facts


@dataclass(slots=True)
class _Fact:
    """A fact candidate on its way through the pipeline."""

    row: retrieval.FactRow
    parts: Components
    line: str
    tokens: int
    via_entity: str | None = None
    bonus: float = 0.0  # a named date's and neighbours' share (see _add_cues), added to the hybrid score

    @property
    def score(self) -> float:
        return self.parts.score + self.bonus

    @property
    def dated(self) -> datetime:
        return fact_date(self.row.valid_from, self.row.recorded_at)


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
class FactStep:
    """The facts decided: the scored candidates, the blocked ones' decisions, and the packed section."""

    scored: list[_Fact]
    servable: list[_Fact]  # scored, less those blocked, in rank order
    blocked: list[TraceDecision]
    expired: int  # scored candidates blocked past their volatility horizon
    blocked_total: int  # members of open conflict sets, beyond those listed
    section: Section[_Fact]

    def decided_ids(self, found: retrieval.FactCandidates) -> list[str]:
        """The facts decided about already (scored or blocked): the one-hop pass leaves them out."""
        return [f.row.id for f in self.scored] + [r.id for r in found.blocked]


def decide_facts(found: retrieval.FactCandidates, call: Call) -> FactStep:
    """Score the candidates; block members of OPEN conflict sets and VOLATILE/EPHEMERAL facts
    past their horizon; gate by distance and pack by decreasing score (the section served as it
    is under `sections` packing; under `merged`, the multi-hop names come from it)."""
    s = call.settings
    scored = sorted(_facts([row for row, _ in found.candidates], call), key=lambda f: (-f.parts.score, f.row.id))[
        : s.candidate_limit
    ]
    expired_ids = {row.id for row, expired in found.candidates if expired}
    blocked = [
        _blocked(
            row,
            ReasonCode.CONFLICT_OPEN,
            call.count_tokens(fact_line(row.text, fact_date(row.valid_from, row.recorded_at))),
        )
        for row in found.blocked
    ]
    blocked += [_blocked(f.row, ReasonCode.VOLATILITY_EXPIRED, f.tokens) for f in scored if f.row.id in expired_ids]
    servable = [f for f in scored if f.row.id not in expired_ids]
    section = pack_section(
        servable,
        cost=_cost,
        budget_left=call.budget,
        included=ReasonCode.TOP_SCORE,
        gated=_gate(call),
        text_of=_text_rule(call),
    )
    return FactStep(scored, servable, blocked, len(scored) - len(servable), found.blocked_total, section)


def _hop_names(facts: Section[_Fact], call: Call) -> list[str]:
    """The entities of the packed facts to follow one hop (full text only, never gated)."""
    if not facts.kept or facts.left <= 0 or call.settings.multi_hop_max_entities <= 0:
        return []
    return entities((f.row.text for f in facts.kept), call.query, call.settings.multi_hop_max_entities)


def _facts(rows: list[retrieval.FactRow], call: Call, via: list[str] | None = None) -> list[_Fact]:
    """Score fact rows and build their served lines."""
    out = []
    for i, row in enumerate(rows):
        dated = fact_date(row.valid_from, row.recorded_at)
        parts = components(row.distance or 0.0, row.full_text or 0.0, dated, call.now, call.weights)
        line = fact_line(row.text, dated)
        out.append(
            _Fact(row=row, parts=parts, line=line, tokens=call.count_tokens(line), via_entity=via[i] if via else None)
        )
    return out


# --- stage 4: rank the episodes


def rank_episodes(found: retrieval.EpisodeCandidates, facts: FactStep, call: Call) -> tuple[FactStep, list[_Chunk]]:
    """Score the episode chunks, add the cues (a named date, the neighbours) to chunks and, in
    one ranking, to facts alike, and keep the best `episode_k` chunks; the facts re-ranked when
    a cue moved them."""
    s = call.settings
    scored = _chunks(found.chunks, call)
    pooled = facts.servable if s.packing is Packing.MERGED else []
    if _add_cues(pooled, scored, call):
        facts = replace(facts, servable=sorted(facts.servable, key=lambda f: (-f.score, f.row.id)))
    ranked = sorted(scored, key=lambda c: (-c.score, c.row.event_id, c.row.chunk))[: call.episode_k]
    return facts, ranked


def _chunks(rows: list[retrieval.ChunkRow], call: Call) -> list[_Chunk]:
    """Score episode chunks and build their served lines."""
    s = call.settings
    named = query_words(call.query) if s.speaker_boost else frozenset()
    out = []
    for row in rows:
        p = components(row.distance, row.full_text, row.occurred_at, call.now, call.weights)
        score = p.score if s.episode_ranking is EpisodeRanking.HYBRID else p.similarity
        if named and row.speaker and names(row.speaker, named):
            score += s.speaker_boost  # "what did Caroline ..." is most often answered by Caroline
        excerpt = served_excerpt(s.episode_excerpt_format, row.text, row.excerpt, row.is_turn, s.episode_excerpt_chars)
        line = episode_line(excerpt, row.occurred_at)
        out.append(_Chunk(row=row, parts=p, score=score, line=line, tokens=call.count_tokens(line), excerpt=excerpt))
    return out


def _add_cues(facts: list[_Fact], chunks: list[_Chunk], call: Call) -> bool:
    """Add to the scores of a pool of candidates (facts and chunks alike) the date bonus (an item
    dated when the query names: "what did Maria do in December 2023?") and the neighbours'
    share (`neighbour_weight` x the best other candidate dated within `neighbour_window_s`: an
    answer sits in the stretch of conversation the question is about). True when anything moved."""
    s = call.settings
    cue = date_cue(call.query) if s.date_boost else None
    if cue is None and not s.neighbour_weight:
        return False
    dates = [f.dated for f in facts] + [c.row.occurred_at for c in chunks]
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


# --- stage 5: pack


@dataclass(frozen=True)
class Packed:
    """What the budget bought: the facts' section (packed again in one ranking under `merged`),
    the multi-hop facts and the episodes, each with every item's verdict."""

    facts: Section[_Fact]
    hops: Section[_Fact]
    episodes: Section[_Chunk]


def pack(call: Call, facts: FactStep, chunks: list[_Chunk], hop_rows: list[tuple[str, retrieval.FactRow]]) -> Packed:
    """Pack the budget. `merged` (the default): facts and episodes as one ranking, so the budget
    goes to what answers best whatever its kind, then the multi-hop facts in what is left.
    `sections`: the facts as decided, the multi-hop facts, then the episodes in what is left."""
    s = call.settings
    text_of = _text_rule(call)
    hop_facts = _hop_facts(hop_rows, call)
    if s.packing is Packing.MERGED:
        fact_section, episodes = pack_merged(
            facts.servable,
            chunks,
            score=_score,
            cost=_cost,
            budget_left=call.budget,
            included=ReasonCode.TOP_SCORE,
            gated=_gate(call),
            cites=_sources,
            cited_as=_turn_event,
            skip_cited=s.skip_cited_turns,
            skip_restated=s.skip_restated_facts,
            text_of=text_of,
        )
        hops = pack_section(
            hop_facts,
            cost=_cost,
            budget_left=episodes.left,
            included=ReasonCode.MULTI_HOP_EXPANSION,
            text_of=text_of,
            said=_said(text_of, fact_section.kept, episodes.kept),
        )
        return Packed(fact_section, hops, episodes)
    fact_section = facts.section
    hops = pack_section(
        hop_facts,
        cost=_cost,
        budget_left=fact_section.left,
        included=ReasonCode.MULTI_HOP_EXPANSION,
        text_of=text_of,
        said=_said(text_of, fact_section.kept),
    )
    served = {e for f in fact_section.kept + hops.kept for e in _sources(f)} if s.skip_cited_turns else set()
    episodes = pack_section(
        chunks,
        cost=_cost,
        budget_left=hops.left,
        included=ReasonCode.TOP_SCORE,
        gated=_gate(call),
        cited=lambda c: _turn_event(c) in served,
        text_of=text_of,
        said=_said(text_of, fact_section.kept, hops.kept),
    )
    return Packed(fact_section, hops, episodes)


def _hop_facts(rows: list[tuple[str, retrieval.FactRow]], call: Call) -> list[_Fact]:
    """The multi-hop candidates, in the statement's order, each fact once (its first entity)."""
    seen: set[str] = set()
    firsts = []
    for entity, row in rows:
        if row.id not in seen:
            seen.add(row.id)
            firsts.append((entity, row))
    return _facts([row for _, row in firsts], call, [entity for entity, _ in firsts])


def _gate(call: Call) -> Callable[[_Fact | _Chunk], bool]:
    """The recall gate of this call (scoring.past_recall_gate at HAKI_RECALL_MAX_DISTANCE)."""
    gate = call.settings.recall_max_distance
    return lambda item: past_recall_gate(item.parts.distance, gate)


def _text_rule(call: Call) -> Callable[[_Fact | _Chunk], str] | None:
    """What the same-text rule compares (HAKI_SKIP_REPEATED_TEXTS), or None when it is off."""
    return _text if call.settings.skip_repeated_texts else None


def _text(item: _Fact | _Chunk) -> str:
    """What an item says in the packet, without its date: a fact's text, a chunk's excerpt."""
    return item.row.text if isinstance(item, _Fact) else item.excerpt


def _said(text_of: Callable[[_Fact | _Chunk], str] | None, *served: list[_Fact] | list[_Chunk]) -> set[str]:
    """The texts of the items served by earlier sections, as packing.same_text keys (none when the rule is off)."""
    if text_of is None:
        return set()
    return {same_text(text_of(item)) for items in served for item in items}


def _cost(item: _Fact | _Chunk) -> int:
    return item.tokens


def _score(item: _Fact | _Chunk) -> float:
    return item.score


def _sources(f: _Fact) -> tuple[str, ...]:
    """The events a fact cites as its sources."""
    return f.row.source_event_ids


def _turn_event(c: _Chunk) -> str | None:
    """The event of a turn recorded as an event of its own: a fact citing that event says what
    the turn said. A chunk of any other event (a session of many turns, a document, a long turn
    split in pieces) is never left out for a citation: a fact cites such an event for a part."""
    return c.row.event_id if c.row.whole_turn else None


# --- stage 6: the trace and the packet


def trace_of(call: Call, facts: FactStep, packed: Packed, clock: _Clock) -> ContextTrace:
    """Every decision in rank order by section, and what the packet holds."""
    servable = len(packed.facts.verdicts)
    decisions = (
        [_fact_decision(v.item, rank, v.decision, v.reason) for rank, v in enumerate(packed.facts.verdicts, 1)]
        + [
            _fact_decision(v.item, rank, v.decision, v.reason)
            for rank, v in enumerate(packed.hops.verdicts, servable + 1)
        ]
        + facts.blocked
        + [_chunk_decision(v.item, rank, v.decision, v.reason) for rank, v in enumerate(packed.episodes.verdicts, 1)]
    )
    warnings = _warnings(facts.blocked_total, facts.expired)
    kept = packed.facts.kept + packed.hops.kept
    return ContextTrace(
        id=str(uuid.uuid4()),
        subject_id=call.subject_id,
        query=call.query,
        budget_tokens=call.budget,
        used_tokens=sum(f.tokens for f in kept) + sum(c.tokens for c in packed.episodes.kept),
        status=PacketStatus.DEGRADED if warnings else PacketStatus.OK,
        empty_reason=_empty_reason(decisions),
        warnings=warnings,
        created_at=call.called_at,
        timings=clock.timings(),
        counts=_counts(decisions),
        reason_counts=_reason_counts(decisions),
        facts_served=len(kept),
        episodes_served=len(packed.episodes.kept),
        decisions=tuple(decisions),
        settings_id=call.record.id,
        as_of=call.as_of,
    )


def packet_of(trace: ContextTrace, packed: Packed) -> ContextPacket:
    """The packet the agent reads: facts by score, then multi-hop facts, then episodes."""
    facts, hops, chunks = packed.facts.kept, packed.hops.kept, packed.episodes.kept
    return ContextPacket(
        trace_id=trace.id,
        facts=tuple(
            [_packet_fact(f, ReasonCode.TOP_SCORE) for f in facts]
            + [_packet_fact(f, ReasonCode.MULTI_HOP_EXPANSION) for f in hops]
        ),
        episodes=tuple(_episode(c) for c in chunks),
        warnings=trace.warnings,
        status=trace.status,
        empty_reason=trace.empty_reason,
        budget_tokens=trace.budget_tokens,
        used_tokens=trace.used_tokens,
        rendered=render_packet([f.line for f in facts], [f.line for f in hops], [c.line for c in chunks]),
        trace=trace,
    )


# --- plumbing


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


def _ms(since: float) -> float:
    return (time.perf_counter() - since) * 1000.0


def _blocked(row: retrieval.FactRow, reason: ReasonCode, line_tokens: int) -> TraceDecision:
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
