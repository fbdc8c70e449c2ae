"""Settings records: every setting is classified, a record's id is its content's hash, and a
replay's settings are the record's with a profile and overrides applied over them."""

from __future__ import annotations

import uuid

import pytest

from haki_context.core import settings_records
from haki_context.core.embedder import Embedder, HashingEncoder
from haki_context.core.errors import InvalidInput
from haki_context.core.runtime import Runtime
from haki_context.settings import PROFILES, RankingProfile, Settings


def test_every_setting_is_either_a_decision_setting_or_an_operational_one() -> None:
    decision, operational = settings_records.DECISION_SETTINGS, settings_records.OPERATIONAL_SETTINGS
    assert len(set(decision)) == len(decision) and len(set(operational)) == len(operational)
    assert not set(decision) & set(operational)
    assert set(decision) | set(operational) == set(Settings.model_fields), (
        "classify the new setting in core/settings_records.py"
    )


def test_a_records_id_changes_with_a_decision_setting_or_the_embedder_only() -> None:
    base = Settings()
    record = settings_records.make_record(base, "model-a", "space-a")
    assert len(record.id) == 32 and record.settings["weight_recency"] == base.weight_recency
    assert settings_records.make_record(Settings(), "model-a", "space-a").id == record.id
    assert settings_records.make_record(Settings(port=9999, log_level="debug"), "model-a", "space-a").id == record.id
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
    seed = settings_records.settings_with(server_now, recorded, profile=RankingProfile.SEED)
    assert seed.ranking_profile is RankingProfile.SEED
    assert seed.packing == PROFILES[RankingProfile.SEED]["packing"] and seed.weight_recency == 0.3
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
