"""Every HAKI_* setting, typed, in one place.

Defaults are the DESIGN.md defaults. Settings are read from the environment
(`HAKI_<NAME>`); tests build a `Settings(...)` directly.
"""

from __future__ import annotations

import ipaddress
import os
from enum import Enum
from pathlib import Path
from typing import Literal

from pydantic_settings import BaseSettings, SettingsConfigDict


class EmbedProvider(str, Enum):
    """Which embedder turns texts into vectors."""

    MINILM = "minilm"  # sentence-transformers all-MiniLM-L6-v2 on torch, loaded offline
    ONNX = "onnx"  # our int8 ONNX build of the same weights, on onnxruntime (same vector space)
    ONNX_FP32 = "onnx-fp32"  # our fp32 ONNX export of the same weights, on onnxruntime (same vector space)
    HASHING = "hashing"  # deterministic hashing embedder, for tests that do not judge meaning


class Settings(BaseSettings):
    """Configuration of one server process."""

    model_config = SettingsConfigDict(env_prefix="HAKI_", extra="ignore", frozen=True)

    @property
    def models_dir(self) -> Path:
        """Where built model files live: shared by every data directory of the machine by default."""
        if self.model_cache_dir is not None:
            return self.model_cache_dir
        return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "haki-context"

    # --- serving
    host: str = "127.0.0.1"
    port: int = 8000
    data_dir: Path = Path("./.haki-data")
    database_url: str | None = None
    dev_mode: bool | None = None  # None: on when bound to loopback with the embedded database
    graphiql: bool = True
    access_log: bool = False  # uvicorn's per-request log line (costs ~0.1 ms a call on the hot path)
    introspection: bool = True
    pool_min_size: int = 2  # a call's two candidates statements run at once
    pool_max_size: int = 10
    # Seconds an idle pooled connection lives (0 = until the server stops). asyncpg's default
    # (300) closes every connection idle that long beyond the pool's minimum (then 1), so an
    # agent calling every five minutes or less often opened a connection for one of its two
    # concurrent statements and planned its statements anew there on every call: 43.1 against
    # 25.3 ms p50 at 10,000 facts (benchmarks/idle.py).
    pool_idle_lifetime_s: float = 0.0
    statement_timeout_ms: int = 10_000
    max_body_bytes: int = 64 * 1024 * 1024

    # --- embedder
    embed_provider: EmbedProvider = EmbedProvider.ONNX
    embed_threads: int = 1  # batches (ingestion): a second thread would compete with the database's writes
    # A lone query (onnx only): 1 for int8 (4.30 vs 4.74 ms on 2 in the server); onnx-fp32 gains from 2
    # (7.0 vs 8.7-9.1 ms), at ~90 MB of RSS for the second session.
    embed_query_threads: int = 1
    embed_batch_size: int = 64
    model_cache_dir: Path | None = None  # built model files (the ONNX builds); None: $XDG_CACHE_HOME/haki-context
    query_cache_size: int = 1024

    # --- GraphQL surface limits
    max_query_depth: int = 10
    max_aliases: int = 15
    max_tokens: int = 2000
    max_context_fields: int = 5

    # --- the assembler (DESIGN.md "The assembler")
    max_budget: int = 100_000
    retrieval_top_k: int = 64
    candidate_limit: int = 256
    # Episode candidates per axis grow with the budget: budget // episode_budget_per_candidate,
    # at least episode_top_k, at most episode_max_k (a 900-token packet holds ~21 turns, 2,000 ~45).
    episode_top_k: int = 32  # the seed's 8 caps a 900-token packet at 8 turns
    episode_max_k: int = 64
    episode_budget_per_candidate: int = 28
    multi_hop_max_entities: int = 2
    multi_hop_max_per_entity: int = 5
    multi_hop_read_rows: int = 100  # an entity's facts read (then ranked) per hop
    weight_similarity: float = 0.6
    weight_full_text: float = 0.6  # the seed's 0.25 under-weighs lexical matches (issue 5 measurements)
    weight_recency: float = 0.15
    recency_tau_days: float = 30.0
    recall_max_distance: float = 0.0  # 0 = gate off
    blocked_trace_limit: int = 256
    episode_excerpt_chars: int = 300
    max_query_lexemes: int = 32
    # Vector search plan (db/retrieval.py): a scope holding at least scope_index_rows facts
    # (or episode chunks) gets an HNSW index of its own, built in the background every
    # scope_index_interval_s (0 = never in the server; `haki-context index-scopes` builds
    # at once) with scope_index_build_memory; smaller scopes are scanned exactly (the
    # scope's covering index: ~5 ms at 10,000 rows, recall 1.0). Measured at 10,000 facts:
    # own HNSW index 6.3 ms, recall 0.998; at 100,000 facts among 1,000,000, the whole fact
    # statement 24 ms with recall 0.956, where the table-wide HNSW it replaces took 56 ms
    # for recall 0.86.
    scope_index_rows: int = 10_000
    scope_index_interval_s: float = 60.0
    scope_index_build_memory: str = "512MB"
    hnsw_ef_search: int = 100
    hnsw_max_scan_tuples: int = 50_000
    # The most rows taken from an HNSW scan (iterative, so past ef_search) before re-sorting to
    # the top k; a scope takes one per 250 of its rows, at least 2k, at most 6k (db/retrieval.py,
    # _FETCH). Top 64 of 100,000 facts (m 16, ef_construction 256): recall 0.966 at 192, 0.985
    # at 256 (7.1 ms), 0.990 at 400 (8.5 ms); ef_search 256 for 256 rows cost more (8.4 ms).
    hnsw_fetch_rows: int = 256
    # A scope of ivf_index_rows rows or more also gets an IVFFlat index (sqrt(rows) lists), read
    # ivf_probes lists deep beside the HNSW scan (db/retrieval.py). Top 64 facts, 300 questions:
    # at 100,000 rows the union's recall is 0.992 (min 0.797) against HNSW's 0.967 (min 0.000),
    # for +1.8 ms a fact statement; at 10,000, 0.998 against 0.997 for +0.7 ms: not worth it.
    ivf_index_rows: int = 50_000
    ivf_probes: int = 8
    # Episodes: candidates by vector (episode_top_k) and by full text (episode_text_k, 0 = off),
    # ranked by "cosine" (the seed) or "hybrid" (the facts' score).
    episode_text_k: int = 32
    episode_ranking: str = "hybrid"
    # "json": the seed's "<kind> <compact JSON>" excerpt; "text": a turn served as "<speaker>: <text>".
    episode_excerpt_format: str = "text"
    speaker_boost: float = 0.1  # added to a turn's score when the query names its speaker (0 = off)
    # Full-text rank (db/retrieval.py): "idf", the share of the query's idf mass a row holds
    # (0..1), or "cover_density", the seed's ts_rank_cd of the OR of the query's lexemes.
    full_text_rank: Literal["idf", "cover_density"] = "idf"
    # The idf rank reads at most this many rows per query lexeme: exact in a smaller scope;
    # in a larger one a lexeme held by more rows counts as held by this many, and only
    # that many of its rows are candidates (db/retrieval.py, _idf).
    full_text_lexeme_rows: int = 1000
    fusion: str = "weighted"  # how the score's axes combine: weighted | normalized | rrf (core/scoring.py)

    # --- volatility horizons, in days (SLOW is still served past its horizon)
    horizon_slow_days: float = 365.0
    horizon_volatile_days: float = 60.0
    horizon_ephemeral_days: float = 7.0

    # --- traces
    trace_retention_days: float | None = None  # None = keep forever
    # True: a trace's commit waits for its WAL to reach disk (~0.9 ms a call here). False: it
    # is visible and atomic at once, but a crash of the database server within ~0.6 s of the
    # call can lose it (db/traces.py). Facts and events always wait.
    durable_traces: bool = False

    @property
    def embedded(self) -> bool:
        """True when the server runs its own PostgreSQL (no HAKI_DATABASE_URL)."""
        return not self.database_url

    @property
    def effective_dev_mode(self) -> bool:
        """Local development mode: requests without a key use project `default`."""
        if self.dev_mode is not None:
            return self.dev_mode
        return self.embedded and _is_loopback(self.host)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def load_settings(**overrides: object) -> Settings:
    """Settings from the environment, with explicit overrides (CLI flags) on top."""
    clean = {k: v for k, v in overrides.items() if v is not None}
    return Settings(**clean)  # type: ignore[arg-type]
