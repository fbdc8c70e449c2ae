"""Retrieval quality on LoCoMo conversations: `python -m benchmarks.quality`.

What it does, in one process:
1. starts an embedded PostgreSQL in a temporary directory (or uses
   `--database-url`), migrates it, and opens a Runtime with the embedder of the
   settings (the shipped ONNX int8 all-MiniLM-L6-v2 unless `--embedder` says
   otherwise; `minilm`, on torch, needs the `[torch]` extra);
2. ingests every turn of each conversation through GraphQL `recordEvents`
   (batches of at most 200 events), one subject per conversation and mode:
   mode "a" one event per turn, mode "b" one event per session holding a
   `messages` list, mode "f" mode a's events plus each session's observations
   asserted as facts citing their evidence turns' events (`assertFact`, see
   benchmarks/locomo.py);
3. asks every question of categories 1-4 with `context(subjectId, query,
   budget)` at each budget; a turn is covered when it comes back as an
   episode chunk (mapped back to its `dia_id`) or as a source event of a
   served fact, and each path's coverage is reported on its own, with the
   facts and episodes served per packet;
4. runs three reference retrievers over the same turn texts at the same k as
   the server's packet (k = distinct turns covered): BM25 (rank_bm25), dense
   cosine with the same embedder, and plain reciprocal-rank fusion of the two;
5. writes benchmarks/results/quality-<date>.json and .md (quality-<date>-<label>
   with `--label`, `--set` or `--variant`), and prints the table.

The whole LoCoMo dev set (4 conversations, 582 questions, modes a and f,
four budgets) takes about two minutes on 2 cores. BM25 needs `rank-bm25` (the `[bench]`
and `[test]` extras).

Settings: `--set name=value` overrides a field of haki_context.settings.Settings
for every variant; `--variant LABEL:name=value,name=value` (repeatable) measures
several assembler configurations on one ingestion (only settings read at query
time may differ between variants; see WRITE_TIME_SETTINGS). The plain
cosine-and-full-text ranking without cues is the profile
`--variant classic:ranking_profile=classic`.

Latency: every question's vector is embedded once before timing (the
server's query cache then serves it), so the client and trace latencies are
those of retrieval, packing, the trace write and GraphQL; the cost of
embedding a question is reported on its own (`query_embed_ms`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson

from haki_context.app import create_app
from haki_context.core.embedding.embedder import Embedder, encoder_for
from haki_context.core.serving.runtime import Runtime, open_pool
from haki_context.core.texts import event_chunks
from haki_context.db import embedded, migrate
from haki_context.settings import Settings

from .locomo import (
    CATEGORIES,
    FACT_MODES,
    MODES,
    NEEDS_DATA,
    Conversation,
    EventSpec,
    Question,
    add_data_argument,
    events,
    load_conversations,
)
from .locomo import (
    data_dir as locomo_dir,
)
from .references import BM25Reference, DenseReference, RRFReference

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = Path(__file__).resolve().parent / "results"
DEFAULT_MODES = ("a", "f")
DEFAULT_BUDGETS = (300, 900, 2000, 6000)
BATCH = 200
RETRIEVERS = ("server", "bm25", "dense", "rrf")
PATHS = ("episodes", "facts")  # how a served turn reached the packet

# Read by the write path or when the runtime opens: the same for every variant of a run.
WRITE_TIME_SETTINGS = frozenset(
    {
        "episode_excerpt_chars",
        "embed_provider",
        "embed_threads",
        "embed_query_threads",
        "embed_batch_size",
        "query_cache_size",
        "database_url",
        "data_dir",
        "pool_min_size",
        "pool_max_size",
        "hnsw_ef_search",
        "hnsw_max_scan_tuples",
        "ivf_index_rows",
        "ivf_probes",
        "statement_timeout_ms",
    }
)
# The assembler's settings, written to every report.
REPORTED_SETTINGS = (
    "embed_provider",
    "retrieval_top_k",
    "candidate_limit",
    "episode_top_k",
    "episode_text_k",
    "episode_ranking",
    "weight_similarity",
    "weight_full_text",
    "weight_recency",
    "recency_tau_days",
    "recall_max_distance",
    "episode_excerpt_chars",
    "episode_excerpt_format",
    "full_text_rank",
    "speaker_boost",
    "ranking_profile",
    "packing",
    "max_query_lexemes",
    "scope_index_rows",
)

CONTEXT_QUERY = """
query($s: String!, $q: String!, $b: Int) {
  context(subjectId: $s, query: $q, budget: $b) {
    usedTokens
    facts { sourceEventIds }
    episodes { eventId chunk tokens }
    trace {
      timings { totalMs }
      decisions { itemKind itemId chunk overallRank fact { sourceEventIds } }
    }
  }
}
"""
# Session-level recall at these k (LongMemEval's unit): the sessions in the order the call ranked
# its candidates (`overallRank`), each candidate counting for the sessions of its turns.
SESSION_KS = (5, 10)
RECORD_MUTATION = "mutation($i: [EventInput!]!) { recordEvents(inputs: $i) { id } }"
ASSERT_MUTATION = "mutation($i: FactInput!) { assertFact(input: $i) { outcome } }"


@dataclass
class Variant:
    label: str
    overrides: dict[str, str]


@dataclass
class Config:
    data_dir: Path = field(default_factory=lambda: locomo_dir() or Path())
    conversations: list[str] | None = None
    modes: tuple[str, ...] = DEFAULT_MODES
    budgets: tuple[int, ...] = DEFAULT_BUDGETS
    limit_questions: int | None = None
    overrides: dict[str, str] = field(default_factory=dict)
    variants: list[Variant] = field(default_factory=list)  # empty: one variant, `label` with `overrides`
    label: str | None = None  # None: the plain file name quality-<date>
    out_dir: Path | None = DEFAULT_OUT  # None: write nothing
    database_url: str | None = None
    bm25_remove_stop_words: bool = True
    embed_cache: bool = True
    details: bool = False  # per-question records in the JSON (about 3 MB for the whole dev set)
    quiet: bool = False
    argv: list[str] = field(default_factory=list)

    def runs(self) -> list[Variant]:
        if not self.variants:
            return [Variant(self.label or "defaults", dict(self.overrides))]
        return [Variant(v.label, {**self.overrides, **v.overrides}) for v in self.variants]


# --- the embedder: one text is encoded once per run


class MemoEncoder:
    """Wraps the server's encoder so a text already encoded in this run is not encoded again.

    Modes a and b, and the dense reference, embed the same turn texts: the
    vectors are the same model's, computed once (a run-long, in-memory memo;
    nothing is cached on disk).
    """

    def __init__(self, inner: Any, enabled: bool = True) -> None:
        self.inner = inner
        self.name = inner.name
        self.enabled = enabled
        self._memo: dict[str, np.ndarray] = {}
        self.encoded = 0
        self.encode_s = 0.0

    def __getattr__(self, name: str) -> Any:  # name, space, set_thread_count...: the inner encoder's
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def encode(self, texts: list[str]) -> np.ndarray:
        if not self.enabled:
            return self._encode(texts)
        missing = list(dict.fromkeys(t for t in texts if t not in self._memo))
        if missing:
            for text, vector in zip(missing, self._encode(missing)):
                self._memo[text] = vector
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        return np.stack([self._memo[t] for t in texts])

    def _encode(self, texts: list[str]) -> np.ndarray:
        started = time.perf_counter()
        out: np.ndarray = self.inner.encode(texts)
        self.encode_s += time.perf_counter() - started
        self.encoded += len(texts)
        return out


# --- the server, in process


@contextlib.asynccontextmanager
async def open_server(config: Config, base: Settings, n_questions: int) -> AsyncIterator[tuple[Runtime, MemoEncoder]]:
    """Embedded PostgreSQL (or `database_url`), migrations, pool and embedder, closed on exit."""
    async with contextlib.AsyncExitStack() as stack:
        dsn = config.database_url
        if dsn is None:
            tmp = Path(tempfile.mkdtemp(prefix="haki-quality-", dir="/tmp" if Path("/tmp").is_dir() else None))
            stack.callback(shutil.rmtree, tmp, ignore_errors=True)
            server = await asyncio.to_thread(embedded.start, tmp / "data")
            stack.callback(server.close)
            dsn = server.uri
        await migrate.apply(dsn)
        pool = await open_pool(dsn, base, min_size=1, max_size=max(2, base.pool_max_size))
        stack.push_async_callback(pool.close)
        inner = await asyncio.to_thread(encoder_for, base)
        encoder = MemoEncoder(inner, enabled=config.embed_cache)
        # The query cache holds every question, so timed calls never embed (see the module's doc).
        embedder = Embedder(
            encoder, cache_size=max(base.query_cache_size, n_questions + 16), batch_size=base.embed_batch_size
        )
        stack.callback(embedder.close)
        await embedder.embed_query("warm up")
        yield Runtime(pool=pool, embedder=embedder, settings=base), encoder


class Client:
    def __init__(self, rt: Runtime) -> None:
        app = create_app(rt.settings, runtime=rt)
        self.http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://quality", timeout=120)

    async def execute(self, query: str, variables: dict[str, Any]) -> dict[str, Any]:
        response = await self.http.post("/graphql", json={"query": query, "variables": variables})
        body = response.json()
        if body.get("errors"):
            raise RuntimeError(f"GraphQL error: {body['errors']}")
        data: dict[str, Any] = body["data"]
        return data

    async def aclose(self) -> None:
        await self.http.aclose()


@dataclass
class Ingested:
    """One conversation in one mode: its subject and the turn behind each (event, chunk)."""

    subject: str
    chunk_turns: dict[str, tuple[str, ...]]  # event id -> dia_id per chunk
    events: int
    chunks: int
    facts: int = 0


def _check_chunks(spec: EventSpec, excerpt_chars: int) -> None:
    n = len(event_chunks(spec.kind, spec.payload, excerpt_chars))
    if n != len(spec.chunk_turns):
        raise AssertionError(f"the server derives {n} chunks from an event, the harness mapped {len(spec.chunk_turns)}")


async def ingest(client: Client, conv: Conversation, mode: str, run_id: str, excerpt_chars: int) -> Ingested:
    subject = f"locomo-{conv.id}-{mode}-{run_id}"
    specs = events(conv, mode)
    chunk_turns: dict[str, tuple[str, ...]] = {}
    for start in range(0, len(specs), BATCH):
        batch = specs[start : start + BATCH]
        for spec in batch:
            _check_chunks(spec, excerpt_chars)
        inputs = [
            {"subjectId": subject, "kind": s.kind, "payload": s.payload, "occurredAt": s.occurred_at.isoformat()}
            for s in batch
        ]
        data = await client.execute(RECORD_MUTATION, {"i": inputs})
        ids = [e["id"] for e in data["recordEvents"]]
        if len(ids) != len(batch):
            raise AssertionError(f"recordEvents returned {len(ids)} ids for {len(batch)} events")
        for event_id, spec in zip(ids, batch):
            chunk_turns[str(event_id)] = spec.chunk_turns
    facts = await assert_observations(client, conv, subject, chunk_turns) if mode in FACT_MODES else 0
    return Ingested(subject, chunk_turns, len(specs), sum(len(s.chunk_turns) for s in specs), facts)


async def assert_observations(
    client: Client, conv: Conversation, subject: str, chunk_turns: dict[str, tuple[str, ...]]
) -> int:
    """Assert each observation of the conversation as a fact citing its evidence turns' events."""
    event_of: dict[str, str] = {}
    for event_id, turns in chunk_turns.items():
        for dia_id in turns:
            event_of.setdefault(dia_id, event_id)
    for obs in conv.observations:
        fact = {
            "subjectId": subject,
            "predicate": obs.predicate,
            "value": obs.text,
            "validFrom": obs.valid_from.isoformat(),
            "sourceEventIds": [event_of[d] for d in obs.evidence],
            "mode": "ADD",
        }
        await client.execute(ASSERT_MUTATION, {"i": fact})
    return len(conv.observations)


# --- measuring


@dataclass
class Answer:
    """One question at one (mode, budget): what each retriever returned."""

    question: Question
    mode: str
    budget: int
    server: list[str]  # distinct dia_ids, in packet order
    bm25: list[str]
    dense: list[str]
    rrf: list[str]
    via: dict[str, list[str]]  # path -> dia_ids served that way (a turn may come both ways)
    facts: int
    episodes: int
    tokens: int
    client_ms: float
    trace_ms: float
    sessions: list[int] = field(default_factory=list)  # distinct sessions, in the call's ranking
    evidence_sessions: frozenset[int] = frozenset()  # the sessions of the question's evidence turns

    @property
    def k(self) -> int:
        return len(self.server)


def ranked_sessions(packet: dict[str, Any], ingested: Ingested, session_of: dict[str, int]) -> list[int]:
    """The sessions of the call's ranked candidates (every fact and episode with an overall
    rank, served or not), in rank order, each once: an episode for its turn's session, a fact
    for the sessions of its source turns."""
    ranked = sorted(
        (d for d in packet["trace"]["decisions"] if d["overallRank"] is not None), key=lambda d: d["overallRank"]
    )
    out: dict[int, None] = {}
    for d in ranked:
        if d["itemKind"] == "EPISODE":
            turns = ingested.chunk_turns.get(str(d["itemId"]), ())
            dia_ids: tuple[str, ...] = (turns[d["chunk"]],) if 0 <= (d["chunk"] or 0) < len(turns) else ()
        else:
            sources = (d.get("fact") or {}).get("sourceEventIds") or []
            dia_ids = tuple(t for event_id in sources for t in ingested.chunk_turns.get(str(event_id), ()))
        for dia_id in dia_ids:
            if dia_id in session_of:
                out[session_of[dia_id]] = None
    return list(out)


def served_turns(packet: dict[str, Any], ingested: Ingested) -> tuple[list[str], dict[str, list[str]], list[str]]:
    """(distinct dia_ids served, those served by each path, event ids the harness could not map)."""
    out: dict[str, None] = {}
    via: dict[str, dict[str, None]] = {p: {} for p in PATHS}
    unknown: list[str] = []
    for ep in packet["episodes"]:
        turns = ingested.chunk_turns.get(str(ep["eventId"]))
        if turns is None or not 0 <= ep["chunk"] < len(turns):
            unknown.append(f"{ep['eventId']}#{ep['chunk']}")
            continue
        out[turns[ep["chunk"]]] = None
        via["episodes"][turns[ep["chunk"]]] = None
    for fact in packet["facts"]:
        for event_id in fact.get("sourceEventIds") or []:
            for dia_id in ingested.chunk_turns.get(str(event_id), ()):
                out[dia_id] = None
                via["facts"][dia_id] = None
    return list(out), {p: list(v) for p, v in via.items()}, unknown


async def ask(
    client: Client,
    conv: Conversation,
    *,
    ingested: Ingested,
    mode: str,
    budget: int,
    bm25: BM25Reference,
    dense: DenseReference,
    rrf: RRFReference,
    vectors: dict[str, np.ndarray],
) -> list[Answer]:
    ids = [t.dia_id for t in conv.turns]
    session_of = {t.dia_id: t.session for t in conv.turns}
    answers = []
    for q in conv.questions:
        started = time.perf_counter()
        data = await client.execute(CONTEXT_QUERY, {"s": ingested.subject, "q": q.question, "b": budget})
        client_ms = (time.perf_counter() - started) * 1000.0
        packet = data["context"]
        server, via, unknown = served_turns(packet, ingested)
        if unknown:
            raise AssertionError(f"episodes of unknown events or chunks: {unknown[:5]}")
        k = len(server)
        answers.append(
            Answer(
                question=q,
                mode=mode,
                budget=budget,
                server=server,
                bm25=[ids[i] for i in bm25.top(q.question, k)],
                dense=[ids[i] for i in dense.top(vectors[q.question], k)],
                rrf=[ids[i] for i in rrf.top(q.question, vectors[q.question], k)],
                via=via,
                facts=len(packet["facts"]),
                episodes=len(packet["episodes"]),
                tokens=int(packet["usedTokens"]),
                client_ms=client_ms,
                trace_ms=float(packet["trace"]["timings"]["totalMs"]),
                sessions=ranked_sessions(packet, ingested, session_of),
                evidence_sessions=frozenset(session_of[d] for d in q.evidence),
            )
        )
    return answers


def _pct(values: Sequence[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 2) if values else None


def summarize(answers: list[Answer]) -> dict[str, Any]:
    """Recall (evidence turns retrieved / evidence turns), per-question recall, hit, sizes, latency."""
    n = len(answers)
    evidence_total = sum(len(a.question.evidence) for a in answers)
    out: dict[str, Any] = {"n": n, "evidence_turns": evidence_total}
    for name in RETRIEVERS:
        found = [len(set(getattr(a, name)) & set(a.question.evidence)) for a in answers]
        out[name] = {
            "recall": round(sum(found) / evidence_total, 4) if evidence_total else None,
            "recall_per_question": round(sum(f / len(a.question.evidence) for f, a in zip(found, answers)) / n, 4)
            if n
            else None,
            "hit": round(sum(f > 0 for f in found) / n, 4) if n else None,
        }
    for path in PATHS:
        found = [len(set(a.via[path]) & set(a.question.evidence)) for a in answers]
        out[f"via_{path}"] = {
            "recall": round(sum(found) / evidence_total, 4) if evidence_total else None,
            "hit": round(sum(f > 0 for f in found) / n, 4) if n else None,
        }
    out["sessions"] = session_recall(answers)
    out["facts_mean"] = round(sum(a.facts for a in answers) / n, 2) if n else None
    out["episodes_mean"] = round(sum(a.episodes for a in answers) / n, 2) if n else None
    out["tokens_mean"] = round(sum(a.tokens for a in answers) / n, 1) if n else None
    out["k_mean"] = round(sum(a.k for a in answers) / n, 2) if n else None
    client = [a.client_ms for a in answers]
    trace = [a.trace_ms for a in answers]
    out["latency_ms"] = {
        "client_p50": _pct(client, 50),
        "client_p95": _pct(client, 95),
        "trace_p50": _pct(trace, 50),
        "trace_p95": _pct(trace, 95),
    }
    return out


def session_recall(answers: list[Answer]) -> dict[str, float | None]:
    """Session-level recall at each of SESSION_KS, as LongMemEval computes it: `all@k`, the share
    of questions whose every evidence session is among the first k sessions of the ranking
    (LongMemEval's printed R@k); `any@k`, those with at least one there."""
    out: dict[str, float | None] = {}
    for k in SESSION_KS:
        hits_all = hits_any = 0
        for a in answers:
            wanted, top = a.evidence_sessions, set(a.sessions[:k])
            hits_all += wanted <= top
            hits_any += bool(wanted & top)
        n = len(answers)
        out[f"all@{k}"] = round(hits_all / n, 4) if n else None
        out[f"any@{k}"] = round(hits_any / n, 4) if n else None
    return out


def results_table(answers: list[Answer], modes: Sequence[str], budgets: Sequence[int]) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for mode in modes:
        results[mode] = {}
        for budget in budgets:
            group = [a for a in answers if a.mode == mode and a.budget == budget]
            results[mode][str(budget)] = {
                "overall": summarize(group),
                "categories": {str(c): summarize([a for a in group if a.question.category == c]) for c in CATEGORIES},
            }
    return results


# --- the run


def build_settings(base_url: str | None, overrides: dict[str, str]) -> Settings:
    unknown = sorted(set(overrides) - set(Settings.model_fields))
    if unknown:
        raise SystemExit(f"unknown setting(s): {', '.join(unknown)} (see haki_context/settings.py)")
    values: dict[str, Any] = {"dev_mode": True, "graphiql": False}
    if base_url:
        values["database_url"] = base_url
    values.update(overrides)
    return Settings(**values)


async def run(config: Config) -> list[dict[str, Any]]:
    """Measure every variant; returns their reports (and writes them unless `out_dir` is None)."""
    wall = time.perf_counter()

    def say(*parts: object) -> None:
        if not config.quiet:
            print(*parts, file=sys.stderr, flush=True)

    variants = config.runs()
    for v in variants[1:]:
        differing = {k for k in WRITE_TIME_SETTINGS if v.overrides.get(k) != variants[0].overrides.get(k)}
        if differing:
            raise SystemExit(f"variant {v.label}: {sorted(differing)} are read at write time; run it on its own")
    conversations = load_conversations(config.data_dir, config.conversations)
    if config.limit_questions is not None:  # the first N of each category, so every figure exists
        for conv in conversations:
            conv.questions = [
                q for c in CATEGORIES for q in [q for q in conv.questions if q.category == c][: config.limit_questions]
            ]
    questions = sorted({q.question for c in conversations for q in c.questions})
    # The ingest settings: the first variant's (write-time settings are equal across variants).
    base = build_settings(config.database_url, variants[0].overrides)
    run_id = uuid.uuid4().hex[:8]
    timings: dict[str, Any] = {}

    t = time.perf_counter()
    async with open_server(config, base, len(questions)) as (rt, encoder):
        timings["start_s"] = round(time.perf_counter() - t, 2)
        say(f"server up in {timings['start_s']} s ({rt.embedder.name})")

        ingest_client = Client(rt)
        ingested: dict[tuple[str, str], Ingested] = {}
        timings["ingest_s"] = {}
        for mode in config.modes:
            t = time.perf_counter()
            for conv in conversations:
                ingested[(mode, conv.id)] = await ingest(ingest_client, conv, mode, run_id, base.episode_excerpt_chars)
            timings["ingest_s"][mode] = round(time.perf_counter() - t, 2)
            say(f"mode {mode}: ingested in {timings['ingest_s'][mode]} s")
        await ingest_client.aclose()

        # References over the same turn texts, and every question's vector (warming the query cache).
        t = time.perf_counter()
        refs: dict[str, tuple[BM25Reference, DenseReference, RRFReference]] = {}
        for conv in conversations:
            texts = [turn.text for turn in conv.turns]
            vectors = await rt.embedder.embed_many(texts)
            bm25_ref = BM25Reference(texts, remove_stop_words=config.bm25_remove_stop_words)
            dense_ref = DenseReference(vectors)
            refs[conv.id] = (bm25_ref, dense_ref, RRFReference(bm25_ref, dense_ref))
        qvectors: dict[str, np.ndarray] = {}
        embed_ms: list[float] = []
        for q in questions:
            started = time.perf_counter()
            qvectors[q] = await rt.embedder.embed_query(q)
            embed_ms.append((time.perf_counter() - started) * 1000.0)
        timings["references_s"] = round(time.perf_counter() - t, 2)
        timings["embedded_texts"] = encoder.encoded
        timings["encode_s"] = round(encoder.encode_s, 2)

        reports = []
        for variant in variants:
            v_started = time.perf_counter()
            settings = build_settings(config.database_url, variant.overrides)
            vrt = dataclasses.replace(rt, settings=settings)
            client = Client(vrt)
            answers: list[Answer] = []
            for mode in config.modes:
                for budget in config.budgets:
                    for conv in conversations:
                        bm25, dense, rrf = refs[conv.id]
                        answers += await ask(
                            client,
                            conv,
                            ingested=ingested[(mode, conv.id)],
                            mode=mode,
                            budget=budget,
                            bm25=bm25,
                            dense=dense,
                            rrf=rrf,
                            vectors=qvectors,
                        )
            await client.aclose()
            questions_s = round(time.perf_counter() - v_started, 2)
            report = _report(
                config,
                variant,
                settings=settings,
                conversations=conversations,
                answers=answers,
                embedder_name=rt.embedder.name,
                timings={**timings, "questions_s": questions_s},
                embed_ms=embed_ms,
                ingested=ingested,
            )
            report["wall_s"] = round(time.perf_counter() - wall, 2)
            reports.append(report)
            if config.out_dir is not None:
                json_path, md_path = write_report(report, config.out_dir)
                report["files"] = [str(json_path), str(md_path)]
            say(f"variant {variant.label}: {len(answers)} context calls in {questions_s} s")
            if not config.quiet:
                print(markdown(report))
    return reports


def _report(
    config: Config,
    variant: Variant,
    *,
    settings: Settings,
    conversations: list[Conversation],
    answers: list[Answer],
    embedder_name: str,
    timings: dict[str, Any],
    embed_ms: list[float],
    ingested: dict[tuple[str, str], Ingested],
) -> dict[str, Any]:
    now = datetime.now(UTC)
    questions = [q for c in conversations for q in c.questions]
    report: dict[str, Any] = {
        "label": variant.label,
        "date": now.date().isoformat(),
        "created_at": now.isoformat(timespec="seconds"),
        "command": config.argv,
        "data": {
            "dir": str(config.data_dir),
            "conversations": [c.id for c in conversations],
            "turns": sum(len(c.turns) for c in conversations),
            "questions": len(questions),
            "questions_by_category": {str(k): sum(q.category == k for q in questions) for k in CATEGORIES},
            "limit_questions": config.limit_questions,
            "invalid_evidence_ids": {c.id: c.invalid_evidence for c in conversations if c.invalid_evidence},
            "invalid_evidence_count": sum(len(c.invalid_evidence) for c in conversations),
            "dropped_questions": sum(c.dropped_questions for c in conversations),
            "chunks": {f"{m}/{cid}": i.chunks for (m, cid), i in ingested.items()},
            "facts": {f"{m}/{cid}": i.facts for (m, cid), i in ingested.items() if i.facts},
        },
        "modes": list(config.modes),
        "budgets": list(config.budgets),
        "settings": {
            "overrides": variant.overrides,
            "effective": {k: _plain(getattr(settings, k)) for k in REPORTED_SETTINGS if hasattr(settings, k)},
        },
        "embedder": embedder_name,
        "references": {
            "k": "per question, the number of distinct turns in the server's packet",
            "text": "core/texts.turn_text of the turn payload, the chunk text the server searches",
            "bm25": "rank_bm25.BM25Okapi, lowercase [a-z0-9]+ tokens, English stop words "
            + ("removed" if config.bm25_remove_stop_words else "kept"),
            "dense": f"cosine with {embedder_name}, the server's embedder",
            "rrf": "reciprocal-rank fusion of the BM25 and dense rankings, 1/(60 + rank) summed",
        },
        "recall": "evidence turns retrieved / evidence turns (recall_per_question: mean over questions)",
        "latency": "ms per context call; question vectors cached before timing (query_embed_ms: embedding one question)",
        "query_embed_ms": {"p50": _pct(embed_ms, 50), "p95": _pct(embed_ms, 95)},
        "timings": timings,
        "results": results_table(answers, config.modes, config.budgets),
    }
    if config.details:
        report["questions"] = [
            {
                "conversation": a.question.conversation,
                "qa": a.question.index,
                "category": a.question.category,
                "mode": a.mode,
                "budget": a.budget,
                "evidence": list(a.question.evidence),
                "server": a.server,
                "bm25": a.bm25,
                "dense": a.dense,
                "rrf": a.rrf,
                "via": a.via,
                "facts": a.facts,
                "episodes": a.episodes,
                "tokens": a.tokens,
                "client_ms": round(a.client_ms, 2),
            }
            for a in answers
        ]
    return report


def _plain(value: Any) -> Any:
    return getattr(value, "value", value)  # an enum setting is reported by its value


# --- output


def _f(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def markdown(report: dict[str, Any]) -> str:
    eff = report["settings"]["effective"]
    lines = [
        f"# Retrieval quality: {report['label']} ({report['date']})",
        "",
        f"Data: LoCoMo {', '.join(report['data']['conversations'])} "
        f"({report['data']['turns']} turns, {report['data']['questions']} questions of categories 1-4; "
        f"{report['data']['invalid_evidence_count']} invalid evidence ids skipped, "
        f"{report['data']['dropped_questions']} questions dropped). Embedder: {report['embedder']}.",
        "",
        "Settings: "
        + (", ".join(f"{k}={v}" for k, v in report["settings"]["overrides"].items()) or "defaults")
        + f" (episode_top_k={eff['episode_top_k']}, episode_ranking={eff['episode_ranking']}, "
        f"episode_text_k={eff['episode_text_k']}, excerpt {eff.get('episode_excerpt_format', 'json')}, "
        f"weights {eff['weight_similarity']}/{eff['weight_full_text']}/"
        f"{eff['weight_recency']}).",
        "",
        f"References at the server's k per question: BM25 = {report['references']['bm25']}; "
        f"dense = {report['references']['dense']}; RRF = {report['references']['rrf']}. "
        "Recall = evidence turns covered / evidence turns; hit = questions with at least one. A turn is "
        "covered as an episode or as the source of a served fact (columns 'via episodes', 'via facts'). "
        "Modes: a, a turn per event; b, a session per event; f, mode a plus the observations as facts. "
        "Latency: ms per call (client / trace totalMs), question vectors cached; embedding a question "
        f"p50 {_f(report['query_embed_ms']['p50'], 1)} ms.",
        "",
        "| mode | budget | n | server recall / hit | RRF | BM25 | dense | via episodes | via facts "
        "| facts | episodes | tokens | k | client p50/p95 | trace p50/p95 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def rh(x: dict[str, Any]) -> str:
        return f"{_f(x['recall'])} / {_f(x['hit'])}"

    for mode, by_budget in report["results"].items():
        for budget, res in by_budget.items():
            o = res["overall"]
            lat = o["latency_ms"]
            lines.append(
                f"| {mode} | {budget} | {o['n']} | **{rh(o['server'])}** | {rh(o['rrf'])} | {rh(o['bm25'])} "
                f"| {rh(o['dense'])} | {rh(o['via_episodes'])} | {rh(o['via_facts'])} "
                f"| {_f(o['facts_mean'], 1)} | {_f(o['episodes_mean'], 1)} | {_f(o['tokens_mean'], 0)} "
                f"| {_f(o['k_mean'], 1)} | {_f(lat['client_p50'], 1)} / {_f(lat['client_p95'], 1)} "
                f"| {_f(lat['trace_p50'], 1)} / {_f(lat['trace_p95'], 1)} |"
            )
    lines += [
        "",
        "Session-level recall (LongMemEval's unit): the sessions of the call's ranked candidates in rank "
        "order; all@k = every evidence session among the first k, any@k = at least one.",
        "",
        "| mode | budget | all@5 | any@5 | all@10 | any@10 |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for mode, by_budget in report["results"].items():
        for budget, res in by_budget.items():
            ss = res["overall"].get("sessions") or {}
            lines.append(
                f"| {mode} | {budget} | {_f(ss.get('all@5'))} | {_f(ss.get('any@5'))} "
                f"| {_f(ss.get('all@10'))} | {_f(ss.get('any@10'))} |"
            )
    lines += [
        "",
        "Per category (recall / hit):",
        "",
        "| mode | budget | category | n | server | RRF | BM25 | dense | via episodes | via facts | facts | episodes |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for mode, by_budget in report["results"].items():
        for budget, res in by_budget.items():
            for cat, c in res["categories"].items():
                lines.append(
                    f"| {mode} | {budget} | {cat} {CATEGORIES[int(cat)]} | {c['n']} | {rh(c['server'])} "
                    f"| {rh(c['rrf'])} | {rh(c['bm25'])} | {rh(c['dense'])} | {rh(c['via_episodes'])} "
                    f"| {rh(c['via_facts'])} | {_f(c['facts_mean'], 1)} | {_f(c['episodes_mean'], 1)} |"
                )
    t = report["timings"]
    lines += [
        "",
        f"Wall time {report.get('wall_s', '-')} s: start {t['start_s']} s, ingest "
        + ", ".join(f"{m} {s} s" for m, s in t["ingest_s"].items())
        + f" ({t['embedded_texts']} texts encoded in {t['encode_s']} s), references {t['references_s']} s, "
        f"questions {t['questions_s']} s.",
        "",
    ]
    return "\n".join(lines)


def write_report(report: dict[str, Any], out_dir: Path) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    # The plain name for a run of the defaults; any other run carries its label as a suffix.
    label = report["label"]
    stem = f"quality-{report['date']}" if label == "defaults" else f"quality-{report['date']}-{_safe(label)}"
    json_path = out_dir / f"{stem}.json"
    md_path = out_dir / f"{stem}.md"
    json_path.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
    md_path.write_text(markdown(report))
    return json_path, md_path


def _safe(label: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_.=" else "_" for ch in label) or "run"


# --- command line


def _pairs(items: Sequence[str], what: str) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise SystemExit(f"{what} {item!r}: expected name=value")
        out[name.strip()] = value.strip()
    return out


def _variant(text: str) -> Variant:
    label, sep, rest = text.partition(":")
    if not label.strip():
        raise SystemExit(f"--variant {text!r}: expected LABEL:name=value,name=value")
    return Variant(label.strip(), _pairs([p for p in rest.split(",") if p.strip()], "--variant") if sep else {})


def parse_args(argv: Sequence[str] | None = None) -> Config:
    p = argparse.ArgumentParser(prog="python -m benchmarks.quality", description=__doc__.split("\n\n")[0])
    add_data_argument(p)
    p.add_argument("--conversations", help="comma-separated file stems, e.g. 26,30 (default: all)")
    p.add_argument(
        "--modes",
        default=",".join(DEFAULT_MODES),
        help="ingestion modes: a (event per turn), b (event per session), f (a + observations as facts)",
    )
    p.add_argument("--budgets", default=",".join(str(b) for b in DEFAULT_BUDGETS))
    p.add_argument(
        "--limit-questions", type=int, help="at most N questions per category and conversation (smoke tests)"
    )
    p.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override a haki_context.settings.Settings field (repeatable)",
    )
    p.add_argument(
        "--variant",
        dest="variants",
        action="append",
        default=[],
        metavar="LABEL:NAME=VALUE,...",
        help="measure several query-time configurations on one ingestion (repeatable)",
    )
    p.add_argument(
        "--label", default=None, help="suffix of the result files' names (default: none, or the --set pairs)"
    )
    p.add_argument(
        "--embedder",
        choices=("onnx", "onnx-fp32", "minilm", "hashing"),
        help="shorthand for --set embed_provider=... (default: the server's, onnx; minilm needs the [torch] extra)",
    )
    p.add_argument("--bm25-stop-words", choices=("remove", "keep"), default="remove")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"results folder (default {DEFAULT_OUT})")
    p.add_argument("--no-write", action="store_true", help="print only")
    p.add_argument("--details", action="store_true", help="add per-question records to the JSON (~3 MB)")
    p.add_argument("--no-embed-memo", action="store_true", help="encode a text each time the server asks")
    p.add_argument("--database-url", help="use this (migrated or empty) PostgreSQL instead of an embedded one")
    p.add_argument("--quiet", action="store_true")
    a = p.parse_args(argv)
    overrides = _pairs(a.sets, "--set")
    if a.embedder:
        overrides["embed_provider"] = a.embedder
    modes = tuple(m.strip() for m in a.modes.split(",") if m.strip())
    if not modes or set(modes) - set(MODES):
        raise SystemExit(f"--modes {a.modes!r}: use any of a, b, f (comma-separated)")
    label = a.label or ("-".join(f"{k}={v}" for k, v in overrides.items()) if overrides else None)
    return Config(
        data_dir=a.data,
        conversations=[c.strip() for c in a.conversations.split(",")] if a.conversations else None,
        modes=modes,
        budgets=tuple(int(b) for b in a.budgets.split(",") if b.strip()),
        limit_questions=a.limit_questions,
        overrides=overrides,
        variants=[_variant(v) for v in a.variants],
        label=label,
        out_dir=None if a.no_write else a.out,
        database_url=a.database_url,
        bm25_remove_stop_words=a.bm25_stop_words == "remove",
        embed_cache=not a.no_embed_memo,
        details=a.details,
        quiet=a.quiet,
        argv=["python", "-m", "benchmarks.quality", *(argv if argv is not None else sys.argv[1:])],
    )


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_args(argv)
    if not config.data_dir.is_dir():
        print(f"no LoCoMo data at {config.data_dir}: this harness {NEEDS_DATA}, or pass --data", file=sys.stderr)
        return 2
    asyncio.run(run(config))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
