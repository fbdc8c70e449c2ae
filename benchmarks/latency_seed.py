"""Seeding for the latency benchmark: the embedding cache and the bulk load.

One subject (the measured one) holds N facts and N events; 9 other subjects
hold copies of its rows with perturbed vectors, so the subject is 10% of the
tables. Rows are written straight into the tables with binary COPY, the texts
derived by the server's own rules (`fact_text`, `event_chunks`), the HNSW
indexes dropped before the load and rebuilt after it with the definitions the
migrations give them, then VACUUM ANALYZE.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np

from haki_context.core.memory.facts import value_hash
from haki_context.core.texts import ChunkText, event_chunks, event_excerpt, fact_text
from haki_context.db import migrate
from haki_context.db.pool import init_connection

from . import latency_texts

FACT_COLUMNS = [
    "project_id",
    "id",
    "subject_id",
    "predicate",
    "value",
    "value_hash",
    "confidence",
    "status",
    "volatility",
    "valid_from",
    "valid_to",
    "recorded_at",
    "last_reinforced_at",
    "source_event_ids",
    "text",
    "embedding",
]
EVENT_COLUMNS = ["project_id", "id", "subject_id", "kind", "payload", "occurred_at", "recorded_at", "excerpt"]
CHUNK_COLUMNS = ["project_id", "event_id", "chunk", "subject_id", "kind", "occurred_at", "text", "excerpt", "embedding"]
DIMENSIONS = 384


class EmbeddingCache:
    """Vectors of texts on disk, keyed by sha256(embedder name + text); append-only shards (.npz)."""

    def __init__(self, folder: Path, embedder_name: str) -> None:
        self.folder = folder / _slug(embedder_name)
        self.embedder_name = embedder_name
        self._index: dict[bytes, tuple[int, int]] = {}
        self._shards: list[np.ndarray] = []
        if self.folder.is_dir():
            for path in sorted(self.folder.glob("shard-*.npz")):
                with np.load(path) as data:
                    keys, vectors = data["keys"], data["vectors"]
                shard = len(self._shards)
                self._shards.append(vectors)
                for row, key in enumerate(keys):
                    self._index[bytes(key)] = (shard, row)

    def key(self, text: str) -> bytes:
        return hashlib.sha256(self.embedder_name.encode() + b"\x00" + text.encode()).digest()

    def get(self, text: str) -> np.ndarray | None:
        hit = self._index.get(self.key(text))
        return None if hit is None else self._shards[hit[0]][hit[1]]

    def put(self, texts: list[str], vectors: np.ndarray) -> None:
        if not texts:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        keys = np.array([np.frombuffer(self.key(t), dtype=np.uint8) for t in texts])
        vectors = np.asarray(vectors, dtype=np.float32)
        digest = hashlib.sha256(keys.tobytes()).hexdigest()[:16]
        tmp = self.folder / f"tmp-{digest}.npz"
        np.savez(tmp, keys=keys, vectors=vectors)
        tmp.rename(self.folder / f"shard-{digest}.npz")
        shard = len(self._shards)
        self._shards.append(vectors)
        for row, key in enumerate(keys):
            self._index[bytes(key)] = (shard, row)

    def __len__(self) -> int:
        return len(self._index)


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


async def embed_cached(
    cache: EmbeddingCache,
    texts: list[str],
    embed_many: Callable[[list[str]], Awaitable[np.ndarray]],
    *,
    batch: int = 1024,
    log: Callable[[str], None] = print,
) -> tuple[np.ndarray, dict[str, Any]]:
    """Vectors of `texts`: from the cache, the rest embedded in batches (each batch stored as it is done)."""
    out = np.zeros((len(texts), DIMENSIONS), dtype=np.float32)
    missing: dict[str, list[int]] = {}
    for i, text in enumerate(texts):
        v = cache.get(text)
        if v is None:
            missing.setdefault(text, []).append(i)
        else:
            out[i] = v
    todo = list(missing)
    started = time.perf_counter()
    for start in range(0, len(todo), batch):
        part = todo[start : start + batch]
        vectors = await embed_many(part)
        cache.put(part, vectors)
        for text, v in zip(part, vectors):
            for i in missing[text]:
                out[i] = v
        done = start + len(part)
        rate = done / max(1e-9, time.perf_counter() - started)
        log(f"  embedded {done}/{len(todo)} uncached texts ({rate:.0f} texts/s)")
    seconds = time.perf_counter() - started
    return out, {
        "texts": len(texts),
        "cached": len(texts) - len(todo),
        "embedded": len(todo),
        "embed_s": round(seconds, 2),
        "texts_per_s": round(len(todo) / seconds, 1) if todo else None,
    }


@dataclass
class Corpus:
    """The measured subject's rows before embedding (texts derived by the server's rules)."""

    facts: list[latency_texts.FactSpec]
    fact_texts: list[str]
    events: list[latency_texts.EventSpec]
    excerpts: list[str]
    chunks: list[list[ChunkText]]  # per event, as the write path derives them

    @property
    def chunk_texts(self) -> list[str]:
        return [c.text for per_event in self.chunks for c in per_event]


def build_corpus(n: int, excerpt_chars: int) -> Corpus:
    facts = list(itertools.islice(latency_texts.facts(), n))
    events = list(itertools.islice(latency_texts.events(), n))
    return Corpus(
        facts=facts,
        fact_texts=[fact_text(f.predicate, f.value) for f in facts],
        events=events,
        excerpts=[event_excerpt(e.kind, e.payload, excerpt_chars) for e in events],
        chunks=[event_chunks(e.kind, e.payload, excerpt_chars) for e in events],
    )


def perturbed(base: np.ndarray, seed: int, sigma: float) -> np.ndarray:
    """base + N(0, sigma) per dimension, renormalised to unit length."""
    rng = np.random.default_rng(seed)
    v = base + rng.normal(0.0, sigma, base.shape).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return v.astype(np.float32)


def hnsw_definitions_from_migrations() -> dict[str, str]:
    """name -> the last `CREATE INDEX ... USING hnsw ...` statement the migrations give that index."""
    found: dict[str, str] = {}
    pattern = re.compile(
        r"CREATE\s+INDEX\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)\s+ON\s+[^;]*?USING\s+hnsw[^;]*;", re.IGNORECASE | re.DOTALL
    )
    for _, sql in migrate.available():
        sql = re.sub(r"--[^\n]*", "", sql)
        for m in pattern.finditer(sql):
            found[m.group(1)] = " ".join(m.group(0).split())
    return found


@dataclass
class SeedReport:
    rows: dict[str, int] = field(default_factory=dict)
    timings_s: dict[str, float] = field(default_factory=dict)
    embedding: dict[str, Any] = field(default_factory=dict)
    hnsw_indexes: dict[str, str] = field(default_factory=dict)
    subjects: list[str] = field(default_factory=list)


async def seed(
    dsn: str,
    *,
    project_id: str,
    subject_id: str,
    others: list[str],
    corpus: Corpus,
    fact_vectors: np.ndarray,
    chunk_vectors: np.ndarray,
    sigma: float,
    maintenance_work_mem: str,
    log: Callable[[str], None] = print,
) -> SeedReport:
    """Load the subject and its perturbed copies, rebuild the HNSW indexes, VACUUM ANALYZE."""
    report = SeedReport(subjects=[subject_id, *others])
    conn = await asyncpg.connect(dsn)
    try:
        await init_connection(conn)  # binary jsonb and vector codecs: COPY carries both
        await conn.execute("SET statement_timeout = 0")
        await conn.execute(f"SET maintenance_work_mem = '{maintenance_work_mem}'")
        live = {
            r["indexname"]: r["indexdef"]
            for r in await conn.fetch(
                "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema()"
                " AND tablename IN ('facts', 'episode_chunks') AND indexdef ILIKE '% USING hnsw %'"
            )
        }
        from_migrations = hnsw_definitions_from_migrations()
        # The migrations' statement when it names a live index; the live definition otherwise.
        definitions = {name: from_migrations.get(name, live[name]) for name in live}
        report.hnsw_indexes = definitions
        # Chunk fields the write path stores beyond the base columns (e.g. is_turn), when the table has them.
        chunk_table = await _columns(conn, "episode_chunks")
        chunk_extra = [
            f.name for f in dataclasses.fields(ChunkText) if f.name in chunk_table and f.name not in CHUNK_COLUMNS
        ]
        await _check_required(conn, "facts", FACT_COLUMNS)
        await _check_required(conn, "events", EVENT_COLUMNS)
        await _check_required(conn, "episode_chunks", CHUNK_COLUMNS + chunk_extra)
        t = time.perf_counter()
        for name in definitions:
            await conn.execute(f'DROP INDEX IF EXISTS "{name}"')
        report.timings_s["drop_hnsw"] = round(time.perf_counter() - t, 2)

        t = time.perf_counter()
        n_facts = n_events = n_chunks = 0
        for k, subject in enumerate([subject_id, *others]):
            fv = fact_vectors if k == 0 else perturbed(fact_vectors, 1000 + k, sigma)
            cv = chunk_vectors if k == 0 else perturbed(chunk_vectors, 2000 + k, sigma)
            event_ids = [uuid.uuid4() for _ in corpus.events]
            event_rows = [
                (project_id, event_ids[i], subject, e.kind, e.payload, e.occurred_at, e.occurred_at, corpus.excerpts[i])
                for i, e in enumerate(corpus.events)
            ]
            chunk_rows = []
            row = 0
            for i, e in enumerate(corpus.events):
                for c in corpus.chunks[i]:
                    chunk_rows.append(
                        (
                            project_id,
                            event_ids[i],
                            c.position,
                            subject,
                            e.kind,
                            e.occurred_at,
                            c.text,
                            c.excerpt,
                            cv[row],
                            *(getattr(c, name) for name in chunk_extra),
                        )
                    )
                    row += 1
            fact_rows = [
                (
                    project_id,
                    uuid.uuid4(),
                    subject,
                    f.predicate,
                    f.value,
                    value_hash(f.value),
                    f.confidence,
                    "ACTIVE",
                    f.volatility,
                    f.valid_from,
                    f.valid_to,
                    f.recorded_at,
                    None,
                    [event_ids[i % len(event_ids)]] if event_ids else [],
                    corpus.fact_texts[i],
                    fv[i],
                )
                for i, f in enumerate(corpus.facts)
            ]
            await conn.copy_records_to_table("events", records=event_rows, columns=EVENT_COLUMNS)
            await conn.copy_records_to_table("episode_chunks", records=chunk_rows, columns=CHUNK_COLUMNS + chunk_extra)
            await conn.copy_records_to_table("facts", records=fact_rows, columns=FACT_COLUMNS)
            # The write path keeps these counts; the vector-search plan is chosen by them.
            await conn.execute(
                "INSERT INTO subjects (project_id, subject_id, fact_rows, chunk_rows) VALUES ($1, $2, $3, $4)"
                " ON CONFLICT (project_id, subject_id) DO UPDATE SET"
                " fact_rows = subjects.fact_rows + excluded.fact_rows,"
                " chunk_rows = subjects.chunk_rows + excluded.chunk_rows",
                project_id,
                subject,
                len(fact_rows),
                len(chunk_rows),
            )
            n_facts += len(fact_rows)
            n_events += len(event_rows)
            n_chunks += len(chunk_rows)
        report.timings_s["copy"] = round(time.perf_counter() - t, 2)
        report.rows = {
            "facts": n_facts,
            "events": n_events,
            "episode_chunks": n_chunks,
            "subject_facts": len(corpus.facts),
            "subject_chunks": len(corpus.chunk_texts),
        }
        log(f"  copied {n_facts} facts, {n_events} events, {n_chunks} chunks in {report.timings_s['copy']:.1f} s")

        for name, definition in definitions.items():
            t = time.perf_counter()
            await conn.execute(definition)
            report.timings_s[f"create_{name}"] = round(time.perf_counter() - t, 2)
            log(f"  built {name} in {report.timings_s[f'create_{name}']:.1f} s")
        t = time.perf_counter()
        await conn.execute("VACUUM ANALYZE")
        report.timings_s["vacuum_analyze"] = round(time.perf_counter() - t, 2)
        t = time.perf_counter()
        await conn.execute("CHECKPOINT")  # so the load's dirty pages are not flushed during the timed phases
        report.timings_s["checkpoint"] = round(time.perf_counter() - t, 2)
    finally:
        await conn.close()
    return report


async def _columns(conn: asyncpg.Connection, table: str) -> set[str]:
    rows = await conn.fetch(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = $1",
        table,
    )
    return {r["column_name"] for r in rows}


async def _check_required(conn: asyncpg.Connection, table: str, copied: list[str]) -> None:
    """Fail loudly when the schema gained a required column this loader does not write."""
    rows = await conn.fetch(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema()"
        " AND table_name = $1 AND is_nullable = 'NO' AND column_default IS NULL AND is_generated = 'NEVER'",
        table,
    )
    missing = sorted({r["column_name"] for r in rows} - set(copied))
    if missing:
        raise RuntimeError(
            f"{table} has required column(s) {missing} that benchmarks/latency_seed.py does not "
            "load; teach the loader what the write path stores there"
        )
