"""Every HAKI_* setting, typed, in one place: the one home of every default.

Settings are read from the environment (`HAKI_<NAME>`); tests build a
`Settings(...)` directly. Each field's docstring is its description (shown by
`scripts/settings_table.py` in docs/operations.md). Closed sets are enums, so a
bad value fails at start-up with the variable's name, not at the first call.

The ranking settings start from a named profile (`HAKI_RANKING_PROFILE`):
`default`, the shipped ranking, or `classic`, the plain cosine-and-full-text
ranking without cues (PROFILES says what it sets). A setting given explicitly
overrides its profile's value.
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import logging
import os
from collections.abc import Mapping
from enum import Enum
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


class EmbedProvider(str, Enum):
    """Which embedder turns texts into vectors."""

    ONNX = "onnx"  # our int8 ONNX graph of all-MiniLM-L6-v2, shipped with the package
    ONNX_FP32 = "onnx-fp32"  # an fp32 ONNX export of the same weights, built on first use (the [torch] extra)
    MINILM = "minilm"  # sentence-transformers all-MiniLM-L6-v2 on torch (the [torch] extra)
    HASHING = "hashing"  # deterministic hashing embedder, for tests that do not judge meaning


class LogLevel(str, Enum):
    """How much the server and the commands log."""

    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


class RankingProfile(str, Enum):
    """A named set of ranking settings."""

    DEFAULT = "default"  # the shipped ranking (docs/retrieval.md)
    CLASSIC = "classic"  # the plain cosine-and-full-text ranking without cues (docs/design.md)


# A profile's former name, still accepted (with a warning) for a release, then refused.
DEPRECATED_PROFILES: dict[str, RankingProfile] = {"seed": RankingProfile.CLASSIC}


class FullTextRank(str, Enum):
    """How a row's full-text rank is computed (db/retrieval.py)."""

    IDF = "idf"  # the share of the query's idf mass the row holds, 0..1
    COVER_DENSITY = "cover_density"  # ts_rank_cd of the OR of the query's lexemes


class EpisodeRanking(str, Enum):
    """How episode candidates are ranked."""

    HYBRID = "hybrid"  # the facts' score: similarity, full text and recency
    COSINE = "cosine"  # cosine similarity alone


class ExcerptFormat(str, Enum):
    """What a packet serves for an episode chunk (core/texts.py)."""

    TEXT = "text"  # a turn as "<speaker>: <text>", other payloads as JSON
    JSON = "json"  # "<kind> <compact JSON>" for every chunk


class MetricsAccess(str, Enum):
    """Who may read /metrics."""

    OFF = "off"  # no /metrics (404)
    KEY = "key"  # with any valid API key, as /graphql asks (keyless in development mode)
    PUBLIC = "public"  # anyone who reaches the port (a private network, a scraper beside the server)


class OtelExporter(str, Enum):
    """Where OpenTelemetry spans go."""

    NONE = "none"  # no spans
    OTLP = "otlp"  # the OTLP/HTTP exporter, set up by the standard OTEL_* variables (the [otel] extra)


class Packing(str, Enum):
    """How a packet's budget is shared between facts and episodes."""

    MERGED = "merged"  # one ranking of facts and episodes by score, packed while they fit
    SECTIONS = "sections"  # facts first, then multi-hop facts, then episodes in what is left


class Tokenizer(str, Enum):
    """What a packet's tokens are counted in (core/context/token_counts.py)."""

    ESTIMATE = "estimate"  # a line's characters / 4, at least 1
    CL100K_BASE = "cl100k_base"  # OpenAI's GPT-4 and GPT-3.5 encoding
    O200K_BASE = "o200k_base"  # OpenAI's GPT-4o encoding and later models'


# What each profile sets, unless a setting is given explicitly.
PROFILES: dict[RankingProfile, dict[str, Any]] = {
    RankingProfile.DEFAULT: {},
    # Episodes by cosine alone (none by full text), 8 whatever the budget, served as compact
    # JSON; facts by 0.6 x cosine + 0.25 x cover-density full text + 0.15 x recency, packed before
    # the episodes; no speaker, date or neighbour cue; a turn a served fact cites is served too.
    RankingProfile.CLASSIC: {
        "episode_ranking": EpisodeRanking.COSINE,
        "episode_top_k": 8,
        "episode_max_k": 8,
        "episode_text_k": 0,
        "episode_excerpt_format": ExcerptFormat.JSON,
        "full_text_rank": FullTextRank.COVER_DENSITY,
        "weight_similarity": 0.6,
        "weight_full_text": 0.25,
        "speaker_boost": 0.0,
        "packing": Packing.SECTIONS,
        "date_boost": 0.0,
        "neighbour_weight": 0.0,
        "skip_cited_turns": False,
        "skip_repeated_texts": False,
    },
}


# Server processes: at least one; `auto` is read as the number of cores before this applies.
Workers = Annotated[int, Field(ge=1, le=256)]


class Settings(BaseSettings):
    """Configuration of one server process."""

    model_config = SettingsConfigDict(env_prefix="HAKI_", extra="ignore", frozen=True, use_attribute_docstrings=True)

    # --- serving
    host: str = "127.0.0.1"
    """Address the server binds."""
    port: Annotated[int, Field(ge=1, le=65535)] = 8000
    """Port the server listens on."""
    data_dir: Path = Path("./.haki-data")
    """Where the embedded PostgreSQL keeps its data (unused with HAKI_DATABASE_URL)."""
    database_url: str | None = None
    """An external PostgreSQL (with the `vector` and `btree_gin` extensions); unset: the embedded one."""
    dev_mode: bool | None = None
    """Requests without a key use project `default`. Unset: on only on loopback with the embedded database."""
    dev_mode_on_any_interface: bool = False
    """Allow keyless development mode on a non-loopback bind (insecure: anyone who reaches the port writes as `default`)."""
    graphiql: bool = True
    """Serve GraphiQL at GET /graphql."""
    cors_origins: Annotated[tuple[str, ...], NoDecode] | None = None
    """Origins a browser page may call the API from (`https://app.example.com`), comma-separated or a JSON list; `*` allows any. Unset: no CORS headers."""
    log_level: LogLevel | None = None
    """debug, info, warning or error; unset: info for `serve` and the long jobs, warning for the short commands."""
    access_log: bool = False
    """Log one line per HTTP request (it costs time on the hot path)."""
    introspection: bool = True
    """Answer GraphQL introspection queries."""
    pool_min_size: int = 2
    """Connections kept open: a context call runs its two candidates statements at once."""
    pool_max_size: int = 10
    """Most connections the pool opens."""
    pool_idle_lifetime_s: float = 0.0
    """Seconds an idle pooled connection lives; 0 keeps it (a new one must plan its statements again)."""
    statement_timeout_ms: int = 10_000
    """PostgreSQL statement timeout of the server's connections; the server itself gives up on a
    statement 5 s after it (a database that stopped answering), 0: neither."""
    max_body_bytes: int = 8 * 1024 * 1024
    """Largest request body accepted; a body is refused at its first byte past it. A request in flight may hold this much memory while it is read."""
    max_concurrent_context: int = 2
    """`context` calls assembled at once per process; more wait in the admission queue."""
    admission_queue: int = 8
    """`context` calls that may wait for a slot; past it a call is refused at once (UNAVAILABLE, 503)."""
    admission_wait_s: float = 0.5
    """Longest a `context` call waits for a slot before it is refused (UNAVAILABLE, 503)."""
    shutdown_grace_s: float = 10.0
    """Seconds a stopping server gives in-flight calls before it ends them."""
    database_check_interval_s: float = 1.0
    """How often the server checks that its database is up (the embedded one is restarted when it died), and each read replica's state and lag."""
    workers: Workers = 1
    """Server processes sharing the port and the database: a number, or `auto` for one per CPU core. Each has its own pool, admission slots and caches (docs/scale-out.md)."""

    # --- read replicas (docs/scale-out.md)
    replica_urls: Annotated[tuple[str, ...], NoDecode] = ()
    """Streaming replicas of the database that serve reads, as comma-separated PostgreSQL URLs; unset: the primary serves everything."""
    replica_max_lag_ms: float = 1000.0
    """A replica whose replay lags more than this is left out of reads until it catches up."""
    replica_wait_ms: float = 250.0
    """Longest a request that sends a consistency token waits for a replica to replay past it; then the primary serves it."""

    # --- embedder
    embed_provider: EmbedProvider = EmbedProvider.ONNX
    """Which embedder runs: onnx, onnx-fp32, minilm or hashing."""
    embed_threads: int = 1
    """Threads for batches (ingestion); more would compete with the database's writes."""
    embed_query_threads: int = 1
    """Threads for a lone query (onnx providers)."""
    embed_batch_size: int = 64
    """Texts encoded per batch."""
    model_cache_dir: Path | None = None
    """Where models built on first use are kept; unset: $XDG_CACHE_HOME/haki-context."""
    query_cache_size: int = 1024
    """Query vectors kept in memory, by text."""

    # --- GraphQL surface limits
    max_query_depth: int = 10
    """Deepest selection a request may nest."""
    max_aliases: int = 15
    """Most aliases in one request."""
    max_tokens: int = 2000
    """Most lexical tokens in one GraphQL document."""
    max_context_fields: int = 5
    """Most `context` fields in one request."""

    # --- the assembler (docs/design.md)
    ranking_profile: RankingProfile = RankingProfile.DEFAULT
    """The ranking settings to start from: default (the shipped ranking), or classic (the plain cosine-and-full-text ranking without cues; `seed`, its former name, still works for a release)."""
    max_budget: int = 100_000
    """Largest token budget a context call may ask for."""
    retrieval_top_k: int = 64
    """Fact candidates taken by vector and by full text, each."""
    candidate_limit: int = 256
    """Most fact candidates scored and traced."""
    episode_top_k: int = 32
    """Fewest episode candidates per axis; more for a larger budget, up to HAKI_EPISODE_MAX_K."""
    episode_max_k: int = 64
    """Most episode candidates per axis."""
    episode_budget_per_candidate: int = 14
    """Budget tokens per episode candidate: a budget asks for budget / this many."""
    episode_text_k: int = 32
    """Episode candidates by full text, beside those by vector (0: vector only)."""
    episode_ranking: EpisodeRanking = EpisodeRanking.HYBRID
    """How episodes are ranked: hybrid (the facts' score) or cosine."""
    episode_excerpt_format: ExcerptFormat = ExcerptFormat.TEXT
    """What an episode serves: text (a turn in its own words) or json."""
    episode_excerpt_chars: int = 300
    """Longest excerpt served for one turn."""
    speaker_boost: float = 0.1
    """Added to a turn's score when the query names its speaker (0: off)."""
    packing: Packing = Packing.MERGED
    """How facts and episodes share the budget: merged (one ranking) or sections (facts first)."""
    tokenizer: Tokenizer = Tokenizer.ESTIMATE
    """What budgets and usedTokens count: estimate (characters / 4), cl100k_base (GPT-4) or o200k_base (GPT-4o); a context call may name its own."""
    skip_cited_turns: bool = True
    """Leave out a conversation turn a served fact cites as its source (CITED_BY_FACT): the fact says it, so the budget goes to other memory."""
    skip_restated_facts: bool = False
    """Leave out a fact whose every source is a turn served above it (SOURCES_SERVED): the turns say it in their own words. Off: an agent reading the packet's facts would miss it."""
    skip_repeated_texts: bool = True
    """Leave out an item whose text is the same as one served above it, whatever the spacing or case (SAME_TEXT_SERVED): the same turn recorded twice is served once."""
    date_boost: float = 0.3
    """Added to a fact's or turn's score when it is dated in the month or day the query names (0: off)."""
    neighbour_weight: float = 0.25
    """A candidate's score gains this share of the best other one dated within HAKI_NEIGHBOUR_WINDOW_S (0: off)."""
    neighbour_window_s: float = 600.0
    """Seconds apart within which two candidates are neighbours (the same stretch of conversation)."""
    multi_hop_max_entities: int = 2
    """Entities of the packed facts followed one hop (0: no multi-hop)."""
    multi_hop_max_per_entity: int = 5
    """Facts taken per followed entity."""
    multi_hop_read_rows: int = 100
    """An entity's facts read, then ranked, per hop."""
    weight_similarity: float = 0.8
    """Weight of cosine similarity in the score."""
    weight_full_text: float = 0.6
    """Weight of the full-text rank in the score."""
    weight_recency: float = 0.15
    """Weight of recency, exp(-age / tau), in the score."""
    recency_tau_days: float = 30.0
    """Recency's time constant, in days."""
    recall_max_distance: float = 0.0
    """Recall gate: candidates farther than this cosine distance are never served (0: off)."""
    blocked_trace_limit: int = 256
    """Most blocked facts a trace lists."""
    max_query_lexemes: int = 32
    """Most distinct query words searched by full text."""
    full_text_rank: FullTextRank = FullTextRank.IDF
    """Full-text rank: idf, or cover_density (PostgreSQL's ts_rank_cd)."""
    full_text_lexeme_rows: int = 1000
    """Rows read per query word by the idf rank; a word held by more counts as held by this many."""

    # --- vector search plan (db/retrieval.py, docs/performance.md)
    scope_index_rows: int = 10_000
    """Rows from which a subject's facts (or episode chunks) get an HNSW index of their own."""
    scope_index_interval_s: float = 60.0
    """Seconds between background passes that build scope indexes, besides the pass a write taking a scope to an indexed size wakes (0: no pass, only `haki-context index-scopes`)."""
    scope_index_build_memory: str = "512MB"
    """maintenance_work_mem of a scope index build."""
    hnsw_ef_search: int = 100
    """pgvector's hnsw.ef_search."""
    hnsw_max_scan_tuples: int = 50_000
    """pgvector's hnsw.max_scan_tuples for iterative scans."""
    hnsw_fetch_rows: int = 256
    """Most rows taken from an HNSW scan before re-sorting to the top k."""
    ivf_index_rows: int = 50_000
    """Rows from which a scope also gets an IVFFlat index, searched beside its HNSW index."""
    ivf_probes: int = 8
    """IVFFlat lists read per search."""

    # --- volatility horizons, in days
    horizon_volatile_days: float = 60.0
    """A VOLATILE fact older than this is blocked."""
    horizon_ephemeral_days: float = 7.0
    """An EPHEMERAL fact older than this is blocked."""

    # --- traces
    trace_retention_days: float | None = None
    """Traces older than this are deleted hourly; unset: kept forever."""
    durable_traces: bool = False
    """Wait for a trace's WAL to reach disk (facts and events always wait)."""

    # --- live traces (the traceAdded subscription)
    subscriptions_per_key: int = 20
    """Most traceAdded subscriptions one key (or development mode) may hold on one server process."""
    subscriptions_per_process: int = 1000
    """Most traceAdded subscriptions one server process holds, all keys together."""
    subscription_buffer: int = 100
    """Traces a subscriber may fall behind before it is dropped (its subscription ends with UNAVAILABLE)."""

    # --- observability
    metrics: MetricsAccess = MetricsAccess.KEY
    """Who may read /metrics: off, key (any valid API key; keyless in development mode) or public."""
    otel_exporter: OtelExporter = OtelExporter.NONE
    """OpenTelemetry spans: none, or otlp (configured by the standard OTEL_* variables; the [otel] extra)."""

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _parse_origins(cls, value: Any) -> Any:
        """A comma-separated or JSON list of origins, each as a browser sends it in `Origin`."""
        items = _listed(value)
        if items is None:
            return value  # the field's own validation names the variable
        return tuple(_origin(item) for item in items) or None

    @field_validator("replica_urls", mode="before")
    @classmethod
    def _parse_replicas(cls, value: Any) -> Any:
        """A comma-separated or JSON list of PostgreSQL URLs."""
        items = _listed(value)
        return value if items is None else tuple(item.strip() for item in items)

    @field_validator("workers", mode="before")
    @classmethod
    def _parse_workers(cls, value: Any) -> Any:
        """`auto`: one process per CPU core this process may run on."""
        if isinstance(value, str) and value.strip().lower() == "auto":
            return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        return value

    @model_validator(mode="before")
    @classmethod
    def _apply_profile(cls, data: Any) -> Any:
        """Fill the ranking settings not given explicitly from the named profile."""
        if not isinstance(data, dict):
            return data
        name = data.get("ranking_profile", RankingProfile.DEFAULT)
        if isinstance(name, str) and name in DEPRECATED_PROFILES:
            profile = DEPRECATED_PROFILES[name]
            logging.getLogger(__name__).warning(
                "HAKI_RANKING_PROFILE=%s is deprecated: the profile is named %s now (the same settings);"
                " %s will be refused in a later release",
                name,
                profile.value,
                name,
            )
            data = {**data, "ranking_profile": profile}
        try:
            profile = RankingProfile(data.get("ranking_profile", RankingProfile.DEFAULT))
        except ValueError:
            return data  # the field's own validation names the variable and the allowed values
        return {**PROFILES[profile], **data}

    @property
    def models_dir(self) -> Path:
        """Where built model files live: shared by every data directory of the machine by default."""
        if self.model_cache_dir is not None:
            return self.model_cache_dir
        return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "haki-context"

    @property
    def embedded(self) -> bool:
        """True when the server runs its own PostgreSQL (no HAKI_DATABASE_URL)."""
        return not self.database_url

    @property
    def effective_dev_mode(self) -> bool:
        """Local development mode: requests without a key use project `default`."""
        if self.dev_mode is not None:
            return self.dev_mode
        return self.embedded and is_loopback(self.host)


def is_loopback(host: str) -> bool:
    """True for `localhost` and loopback addresses (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _listed(value: Any) -> list[str] | None:
    """The non-blank items of a setting written as a comma-separated or JSON list; None when
    `value` is no list (the field's own validation then names the variable)."""
    if isinstance(value, str):
        text = value.strip()
        value = json.loads(text) if text.startswith("[") else text.split(",")
    if not isinstance(value, list | tuple):
        return None
    return [str(item) for item in value if str(item).strip()]


def _origin(text: str) -> str:
    """`text` as the `Origin` header states it (scheme://host[:port], no path or trailing slash),
    or `*`; a browser's `Origin` is compared with it exactly, so anything else never matches."""
    text = text.strip()
    if text == "*":
        return text
    parts = urlsplit(text.rstrip("/"))
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.path or parts.query or parts.fragment:
        raise ValueError(f"{text!r} is no origin: write scheme://host[:port], e.g. https://app.example.com")
    return f"{parts.scheme}://{parts.netloc.lower()}"


def default(name: str) -> Any:
    """The default of setting `name`, for a function that takes it as an argument (so the
    literal lives here only)."""
    return Settings.model_fields[name].default


def load_settings(**overrides: Any) -> Settings:
    """Settings from the environment, with explicit overrides (CLI flags) on top."""
    return Settings(**{k: v for k, v in overrides.items() if v is not None})


# HAKI_* variables the product reads outside Settings: the MCP command's API key
# (mcp_server/stdio.py), a secret kept out of the settings and so out of their records.
API_KEY_ENV = "HAKI_API_KEY"
READ_OUTSIDE_SETTINGS = (API_KEY_ENV,)


def unknown_settings(environ: Mapping[str, str] | None = None) -> list[tuple[str, str | None]]:
    """Each HAKI_* variable of `environ` (default: this process's) that nothing reads, with the
    known name closest to it, or None when none is close: a misspelt setting is otherwise
    ignored without a word. Names compare case-insensitively, as the settings are read."""
    environ = os.environ if environ is None else environ
    prefix = Settings.model_config["env_prefix"]
    known = sorted({name.upper() for name in Settings.model_fields} | {n[len(prefix) :] for n in READ_OUTSIDE_SETTINGS})
    unknown: list[tuple[str, str | None]] = []
    for variable in sorted(environ):
        name = variable.upper()
        if not name.startswith(prefix) or name[len(prefix) :] in known:
            continue
        # Compared without the prefix: every name shares it, which would make any two look alike.
        close = difflib.get_close_matches(name[len(prefix) :], known, n=1)
        unknown.append((variable, prefix + close[0] if close else None))
    return unknown
