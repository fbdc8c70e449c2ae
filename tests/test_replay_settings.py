"""Settings records: every setting is classified, a record's id is its content's hash, and a
replay's settings are the record's with a profile and overrides applied over them."""

from __future__ import annotations

import hashlib
import logging
import uuid
from typing import Any

import orjson
import pytest
from conftest import client_for, make_settings
from contextlib_helpers import assert_fact, context, record

from haki_context.core.context import settings_records
from haki_context.core.embedding.embedder import Embedder, HashingEncoder
from haki_context.core.errors import InvalidInput
from haki_context.core.serving.runtime import Runtime
from haki_context.db import settings_records as db_settings_records
from haki_context.settings import PROFILES, LogLevel, RankingProfile, Settings


def test_every_setting_is_either_a_decision_setting_or_an_operational_one() -> None:
    decision, operational = settings_records.DECISION_SETTINGS, settings_records.OPERATIONAL_SETTINGS
    assert len(set(decision)) == len(decision) and len(set(operational)) == len(operational)
    assert not set(decision) & set(operational)
    assert set(decision) | set(operational) == set(Settings.model_fields), (
        "classify the new setting in core/context/settings_records.py"
    )


def test_a_records_id_changes_with_a_decision_setting_or_the_embedder_only() -> None:
    base = Settings()
    record = settings_records.make_record(base, "model-a", "space-a")
    assert len(record.id) == 32 and record.settings["weight_recency"] == base.weight_recency
    assert settings_records.make_record(Settings(), "model-a", "space-a").id == record.id
    assert (
        settings_records.make_record(Settings(port=9999, log_level=LogLevel.DEBUG), "model-a", "space-a").id
        == record.id
    )
    assert settings_records.make_record(Settings(weight_recency=0.3), "model-a", "space-a").id != record.id
    assert settings_records.make_record(base, "model-b", "space-a").id != record.id
    assert record.embedder == {"name": "model-a", "space": "space-a"}


def test_the_record_of_a_runtimes_settings_is_made_once() -> None:
    settings, embedder = Settings(), Embedder(HashingEncoder())
    try:
        first = settings_records.record_of(settings, embedder)
        assert settings_records.record_of(settings, embedder) is first
        other = settings_records.record_of(Settings(weight_recency=0.3), embedder)
        assert other.id != first.id
    finally:
        embedder.close()


def test_replay_settings_are_the_records_then_the_profile_then_the_overrides() -> None:
    recorded = settings_records.make_record(Settings(weight_recency=0.3, retrieval_top_k=16), "m", "s")
    server_now = Settings(weight_recency=0.9, port=1234)
    again = settings_records.settings_with(server_now, recorded)
    assert (again.weight_recency, again.retrieval_top_k, again.port) == (0.3, 16, 1234)
    classic = settings_records.settings_with(server_now, recorded, profile=RankingProfile.CLASSIC)
    assert classic.ranking_profile is RankingProfile.CLASSIC
    assert classic.packing == PROFILES[RankingProfile.CLASSIC]["packing"] and classic.weight_recency == 0.3
    tuned = settings_records.settings_with(server_now, recorded, overrides={"weight_recency": 0.5})
    assert tuned.weight_recency == 0.5
    assert settings_records.settings_with(server_now, None).weight_recency == 0.9


@pytest.mark.parametrize(
    ("overrides", "message"),
    [({"port": 80}, "no setting a replay can change"), ({"retrieval_top_k": "many"}, "retrieval_top_k")],
)
def test_a_replay_override_outside_the_decision_settings_or_of_a_wrong_value_is_invalid(
    overrides: dict[str, object], message: str
) -> None:
    with pytest.raises(InvalidInput, match=message):
        settings_records.settings_with(Settings(), None, overrides=overrides)


async def test_a_record_is_written_once_per_project_and_read_back(runtime: Runtime) -> None:
    project = f"project-{uuid.uuid4().hex[:12]}"
    record = settings_records.make_record(runtime.settings, "m", "s")
    async with runtime.pool.acquire() as conn:
        await settings_records.ensure_written(conn, project, record)
        await settings_records.ensure_written(conn, project, record)
        rows = await conn.fetchval(
            "SELECT count(*) FROM settings_records WHERE project_id = $1 AND id = $2", project, record.id
        )
        loaded = await settings_records.load(conn, project, record.id)
        unknown = await settings_records.load(conn, f"{project}-other", record.id)
    assert rows == 1 and loaded == record and unknown is None


# ------------------------------------------------ records stored before `seed` was named `classic`

# The decision settings of records as stored before the rename (before skip_restated_facts and
# skip_repeated_texts were kept, too): the classic profile's, under its former name, and the
# default profile's.
STORED_CLASSIC = {
    "blocked_trace_limit": 256,
    "candidate_limit": 256,
    "date_boost": 0.0,
    "episode_budget_per_candidate": 14,
    "episode_excerpt_chars": 300,
    "episode_excerpt_format": "json",
    "episode_max_k": 8,
    "episode_ranking": "cosine",
    "episode_text_k": 0,
    "episode_top_k": 8,
    "full_text_lexeme_rows": 1000,
    "full_text_rank": "cover_density",
    "hnsw_ef_search": 100,
    "hnsw_fetch_rows": 256,
    "hnsw_max_scan_tuples": 50000,
    "horizon_ephemeral_days": 7.0,
    "horizon_volatile_days": 60.0,
    "ivf_index_rows": 50000,
    "ivf_probes": 8,
    "max_query_lexemes": 32,
    "multi_hop_max_entities": 2,
    "multi_hop_max_per_entity": 5,
    "multi_hop_read_rows": 100,
    "neighbour_weight": 0.0,
    "neighbour_window_s": 600.0,
    "packing": "sections",
    "ranking_profile": "seed",
    "recall_max_distance": 0.0,
    "recency_tau_days": 30.0,
    "retrieval_top_k": 64,
    "scope_index_rows": 10000,
    "speaker_boost": 0.0,
    "weight_full_text": 0.25,
    "weight_recency": 0.15,
    "weight_similarity": 0.6,
}
STORED_DEFAULT = {
    **STORED_CLASSIC,
    "date_boost": 0.3,
    "episode_excerpt_format": "text",
    "episode_max_k": 64,
    "episode_ranking": "hybrid",
    "episode_text_k": 32,
    "episode_top_k": 32,
    "full_text_rank": "idf",
    "neighbour_weight": 0.25,
    "packing": "merged",
    "ranking_profile": "default",
    "skip_cited_turns": True,
    "speaker_boost": 0.1,
    "weight_full_text": 0.6,
    "weight_similarity": 0.8,
}


def stored_record(values: dict[str, Any], name: str, space: str) -> settings_records.SettingsRecord:
    """A record as it was stored: its body, and the id its content's hash gave it."""
    body = {"version": 1, "settings": values, "embedder": {"name": name, "space": space}}
    canonical = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
    return settings_records.SettingsRecord(hashlib.sha256(canonical).hexdigest()[:32], orjson.loads(canonical))


@pytest.mark.parametrize(
    ("values", "stored_id", "profile"),
    [
        (STORED_CLASSIC, "e0a3ac28701afb0faae3d8bb46e0afde", RankingProfile.CLASSIC),
        (STORED_DEFAULT, "9cea07800adf5c8855837fedac3fa425", RankingProfile.DEFAULT),
    ],
)
def test_a_record_stored_before_the_rename_reads_and_replays_under_its_own_id(
    values: dict[str, Any], stored_id: str, profile: RankingProfile, caplog: pytest.LogCaptureFixture
) -> None:
    old = stored_record(values, "m", "s")
    assert old.id == stored_id  # the id the release before the rename gave it
    assert old.settings["ranking_profile"] == profile.value  # read by the profile's name
    with caplog.at_level(logging.WARNING, logger="haki_context.settings"):
        replayed = settings_records.settings_with(Settings(), old)
    assert replayed.ranking_profile is profile and not caplog.records  # a stored record is no deprecated setting
    assert all(getattr(replayed, k) == PROFILES[profile][k] for k in PROFILES[profile])
    again = settings_records.make_record(replayed, "m", "s")
    assert again.id == old.id and again.body == old.body  # the replay runs under the same record


def test_a_call_under_classic_makes_the_record_a_call_under_seed_made() -> None:
    classic = settings_records.make_record(Settings(ranking_profile=RankingProfile.CLASSIC), "m", "s")
    assert classic.id == stored_record(STORED_CLASSIC, "m", "s").id
    assert classic.body["settings"]["ranking_profile"] == "seed"  # spelled as records always spelled it
    assert classic.settings["ranking_profile"] == "classic"  # read by its name
    # The former name is a string only (no member of RankingProfile), as the environment gives it.
    former = Settings(ranking_profile="seed")  # type: ignore[arg-type]
    assert settings_records.make_record(former, "m", "s").id == classic.id


async def test_a_call_stored_under_a_seed_record_replays_under_it_as_classic(
    runtime: Runtime, migrated: str, subject: str
) -> None:
    settings = make_settings(migrated, ranking_profile="classic")
    classic = client_for(Runtime(pool=runtime.pool, embedder=runtime.embedder, settings=settings))
    server = client_for(runtime)  # the server's settings are the default profile's
    try:
        await assert_fact(classic, subject, "garden_plan", "tomatoes by the south wall")
        await record(classic, subject, [f"note {i} about the garden tomatoes" for i in range(10)])
        stored = await context(classic, subject, "garden tomatoes")
        old = stored_record(STORED_CLASSIC, runtime.embedder.name, runtime.embedder.space)
        async with runtime.pool.acquire() as conn:  # as the release before the rename stored it
            await db_settings_records.insert(conn, "default", old.id, old.body)
            await conn.execute(
                "UPDATE context_traces SET settings_id = $2 WHERE id = $1", uuid.UUID(stored["traceId"]), old.id
            )
        lookup = "query($id: ID!) { trace(id: $id) { settings { id rankingProfile values } } }"
        shown = (await server.execute(lookup, {"id": stored["traceId"]}))["trace"]["settings"]
        assert shown["id"] == old.id and shown["rankingProfile"] == "classic"
        assert shown["values"]["ranking_profile"] == "classic" and shown["values"]["episode_ranking"] == "cosine"
        again = (
            await server.execute(
                "query($id: ID!) { replay(traceId: $id) { settings { id rankingProfile } diff { identical } } }",
                {"id": stored["traceId"]},
            )
        )["replay"]
        assert again["settings"] == {"id": old.id, "rankingProfile": "classic"}
        assert again["diff"]["identical"]
    finally:
        await classic.http.aclose()
        await server.http.aclose()
