"""Settings records: what a context call ran under, so that it can be explained and replayed.

A record holds every setting that changes a decision of the assembler (`DECISION_SETTINGS`:
the ranking profile, weights, candidate counts, the recall gate, the horizons, the search
plan's settings) and the embedder's identity, as canonical JSON. Its id is the SHA-256 of that
JSON: one row per project and distinct record (db/settings_records.py), referenced by each trace
as `settings_id`. The hot path pays nothing per call: the record of a (settings, embedder) pair
is built once per process, and written once per project and process.

Every setting is either a decision setting or an operational one (`OPERATIONAL_SETTINGS`:
serving, limits, pools, logging); tests/test_replay.py checks that each field of Settings is
in exactly one of the two, so a new setting is classified when it is added.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import asyncpg
import orjson
from pydantic import ValidationError

from ...db import settings_records as db_settings_records
from ...settings import PROFILES, RankingProfile, Settings
from ..embedding.embedder import Embedder
from ..errors import InvalidInput
from ..serving.runtime import Runtime

# Settings that change which items a call considers, how it scores them or what it keeps.
DECISION_SETTINGS = (
    "ranking_profile",
    "retrieval_top_k",
    "candidate_limit",
    "episode_top_k",
    "episode_max_k",
    "episode_budget_per_candidate",
    "episode_text_k",
    "episode_ranking",
    "episode_excerpt_format",
    "episode_excerpt_chars",
    "speaker_boost",
    "packing",
    "tokenizer",
    "skip_cited_turns",
    "skip_restated_facts",
    "skip_repeated_texts",
    "date_boost",
    "neighbour_weight",
    "neighbour_window_s",
    "multi_hop_max_entities",
    "multi_hop_max_per_entity",
    "multi_hop_read_rows",
    "weight_similarity",
    "weight_full_text",
    "weight_recency",
    "recency_tau_days",
    "recall_max_distance",
    "blocked_trace_limit",
    "max_query_lexemes",
    "full_text_rank",
    "full_text_lexeme_rows",
    "scope_index_rows",
    "hnsw_ef_search",
    "hnsw_max_scan_tuples",
    "hnsw_fetch_rows",
    "ivf_index_rows",
    "ivf_probes",
    "horizon_volatile_days",
    "horizon_ephemeral_days",
)

# Decision settings added after records were first kept, with the value that behaves as the
# server did before: a record without one ran without the rule, and its replay does too.
ADDED_LATER: dict[str, Any] = {
    "skip_cited_turns": False,
    "skip_restated_facts": False,
    "skip_repeated_texts": False,
    "tokenizer": "estimate",
}

# Settings that change how the server runs, never what a call decides.
OPERATIONAL_SETTINGS = (
    "host",
    "port",
    "data_dir",
    "database_url",
    "dev_mode",
    "dev_mode_on_any_interface",
    "graphiql",
    "cors_origins",
    "log_level",
    "access_log",
    "introspection",
    "pool_min_size",
    "pool_max_size",
    "pool_idle_lifetime_s",
    "statement_timeout_ms",
    "max_body_bytes",
    "max_concurrent_context",
    "admission_queue",
    "admission_wait_s",
    "shutdown_grace_s",
    "database_check_interval_s",
    "workers",
    "replica_urls",
    "replica_max_lag_ms",
    "replica_wait_ms",
    "embed_provider",  # the embedder's identity is recorded from the embedder itself
    "embed_threads",
    "embed_query_threads",
    "embed_batch_size",
    "model_cache_dir",
    "query_cache_size",
    "max_query_depth",
    "max_aliases",
    "max_tokens",
    "max_context_fields",
    "max_budget",  # a bound on the budget asked; the budget itself is in the trace
    "scope_index_interval_s",
    "scope_index_build_memory",
    "trace_retention_days",
    "durable_traces",
    "subscriptions_per_key",
    "subscriptions_per_process",
    "subscription_buffer",
    "metrics",
    "otel_exporter",
)

# The record's layout; a change of it makes new ids, never a misread old record.
RECORD_VERSION = 1

# A profile as a record spells it, where that differs from its name: `classic` was named `seed`
# when records were first kept, and records keep that spelling, so the same settings make the
# same record (the same id) before and after the rename, and a stored record of either reads
# and replays as `classic`. A record is read with the profile's name (SettingsRecord.settings).
RECORDED_PROFILES: dict[str, str] = {RankingProfile.CLASSIC.value: "seed"}
_PROFILES_RECORDED = {spelling: name for name, spelling in RECORDED_PROFILES.items()}


@dataclass(frozen=True)
class SettingsRecord:
    """A settings record: `id` is the SHA-256 (hex, 32 characters) of `body`'s canonical JSON."""

    id: str
    body: dict[str, Any]

    @property
    def settings(self) -> dict[str, Any]:
        """The decision settings by name, as JSON values (the profile by its name, RECORDED_PROFILES)."""
        values = dict(self.body.get("settings", {}))
        profile = values.get("ranking_profile")
        if isinstance(profile, str) and profile in _PROFILES_RECORDED:
            values["ranking_profile"] = _PROFILES_RECORDED[profile]
        return values

    @property
    def embedder(self) -> dict[str, str]:
        """The embedder's name and vector space."""
        return dict(self.body.get("embedder", {}))


def make_record(settings: Settings, embedder_name: str, embedder_space: str) -> SettingsRecord:
    """The record of these settings and this embedder.

    A setting of ADDED_LATER is left out while it holds the value that behaves as before it
    existed: settings that decide as a record made before it decided keep that record's id, so
    its replay runs under the same record. For the same reason a profile is written as records
    spell it (RECORDED_PROFILES)."""
    names = [n for n in DECISION_SETTINGS if n in Settings.model_fields]
    values = settings.model_dump(mode="json", include=set(names))
    values = {k: v for k, v in values.items() if k not in ADDED_LATER or v != ADDED_LATER[k]}
    profile = values["ranking_profile"]
    values["ranking_profile"] = RECORDED_PROFILES.get(profile, profile)
    body = {
        "version": RECORD_VERSION,
        "settings": values,
        "embedder": {"name": embedder_name, "space": embedder_space},
    }
    canonical = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
    return SettingsRecord(hashlib.sha256(canonical).hexdigest()[:32], orjson.loads(canonical))


# Records by (settings, embedder) object, made once per process; a handful in a server (its
# runtime's settings), more in tests and benchmarks, which make runtimes with other settings.
_RECORDS: dict[tuple[int, int], tuple[Settings, Embedder, SettingsRecord]] = {}
_MOST_RECORDS = 256
# (project, record id) pairs this process has written.
_WRITTEN: set[tuple[str, str]] = set()
_MOST_WRITTEN = 100_000


def record_of(settings: Settings, embedder: Embedder) -> SettingsRecord:
    """The record a call under these settings and this embedder runs under (cached by identity)."""
    key = (id(settings), id(embedder))
    hit = _RECORDS.get(key)
    if hit is not None and hit[0] is settings and hit[1] is embedder:
        return hit[2]
    record = make_record(settings, embedder.name, embedder.space)
    if len(_RECORDS) >= _MOST_RECORDS:
        _RECORDS.clear()
    _RECORDS[key] = (settings, embedder, record)  # holding the objects keeps their ids unique
    return record


async def ensure_written(conn: asyncpg.Connection, project_id: str, record: SettingsRecord) -> None:
    """Write the record for `project_id` unless this process did already (a statement the first time only)."""
    key = (project_id, record.id)
    if key in _WRITTEN:
        return
    await db_settings_records.insert(conn, project_id, record.id, record.body)
    if len(_WRITTEN) >= _MOST_WRITTEN:
        _WRITTEN.clear()
    _WRITTEN.add(key)


async def load(conn: asyncpg.Connection, project_id: str, record_id: str) -> SettingsRecord | None:
    """A stored record; None when the project has none of that id."""
    body = await db_settings_records.get(conn, project_id, record_id)
    return None if body is None else SettingsRecord(record_id, body)


def settings_with(
    base: Settings,
    record: SettingsRecord | None,
    *,
    profile: RankingProfile | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Settings:
    """`base` (the server's settings) with a record's decision settings, then a profile's
    values, then `overrides` (decision settings by name) applied over it. INVALID_INPUT names
    an override that is no decision setting or a value its setting refuses."""
    values: dict[str, Any] = {}
    if record is not None:
        values.update({k: v for k, v in ADDED_LATER.items() if k not in record.settings})
        values.update({k: v for k, v in record.settings.items() if k in Settings.model_fields})
    if profile is not None:
        values.update(PROFILES[profile])
        values["ranking_profile"] = profile
    for name, value in (overrides or {}).items():
        if name not in DECISION_SETTINGS or name not in Settings.model_fields:
            raise InvalidInput(
                f"{name!r} is no setting a replay can change; use one of {', '.join(sorted(DECISION_SETTINGS))}",
                field="with.settings",
            )
        values[name] = value
    try:
        return base.model_validate({**base.model_dump(), **values})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "settings"
        raise InvalidInput(f"{where}: {first.get('msg', 'invalid value')}", field="with.settings") from None


# Records read back, by (project, id): a record never changes (its id is its content's hash),
# so a page of traces made under one record reads it once.
_LOADED: dict[tuple[str, str], SettingsRecord] = {}


async def by_id(rt: Runtime, project_id: str, record_id: str) -> SettingsRecord | None:
    """A stored record of the project; None when it has none of that id."""
    key = (project_id, record_id)
    hit = _LOADED.get(key)
    if hit is not None:
        return hit
    record = await rt.reads.run(lambda conn: load(conn, project_id, record_id))
    if record is not None:
        if len(_LOADED) >= _MOST_WRITTEN:
            _LOADED.clear()
        _LOADED[key] = record
    return record
