"""Ranking profiles: `classic` gives the plain cosine-and-full-text ranking without cues, `default`
the shipped one; `seed`, the former name of `classic`, still selects it (with a warning)."""

from __future__ import annotations

import logging
import math

import pytest
from conftest import GraphQLClient, client_for, make_settings
from contextlib_helpers import assert_fact, context, decisions, record

from haki_context.core.serving.runtime import Runtime
from haki_context.settings import EpisodeRanking, ExcerptFormat, FullTextRank, Packing, RankingProfile, Settings


def test_the_classic_profile_sets_the_plain_ranking_without_cues() -> None:
    s = Settings(ranking_profile=RankingProfile.CLASSIC)
    assert s.episode_ranking is EpisodeRanking.COSINE
    assert (s.episode_top_k, s.episode_max_k, s.episode_text_k) == (8, 8, 0)
    assert s.episode_excerpt_format is ExcerptFormat.JSON
    assert s.full_text_rank is FullTextRank.COVER_DENSITY
    assert (s.weight_similarity, s.weight_full_text, s.weight_recency) == (0.6, 0.25, 0.15)
    assert (s.speaker_boost, s.date_boost, s.neighbour_weight) == (0.0, 0.0, 0.0)
    assert s.packing is Packing.SECTIONS and not s.skip_cited_turns


def test_seed_still_selects_the_classic_profile_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("HAKI_RANKING_PROFILE", "seed")
    with caplog.at_level(logging.WARNING, logger="haki_context.settings"):
        s = Settings()
    assert s.ranking_profile is RankingProfile.CLASSIC and s == Settings(ranking_profile=RankingProfile.CLASSIC)
    (warning,) = [r.getMessage() for r in caplog.records if r.name == "haki_context.settings"]
    assert "HAKI_RANKING_PROFILE=seed is deprecated" in warning and "named classic" in warning
    caplog.clear()
    monkeypatch.setenv("HAKI_RANKING_PROFILE", "classic")
    assert Settings().ranking_profile is RankingProfile.CLASSIC and not caplog.records


def test_a_setting_given_explicitly_overrides_its_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings(ranking_profile=RankingProfile.CLASSIC, weight_full_text=0.4).weight_full_text == 0.4
    monkeypatch.setenv("HAKI_RANKING_PROFILE", "classic")
    monkeypatch.setenv("HAKI_EPISODE_TOP_K", "12")
    s = Settings()
    assert s.episode_top_k == 12 and s.episode_ranking is EpisodeRanking.COSINE


def test_the_default_profile_is_the_shipped_ranking() -> None:
    s = Settings()
    assert s.episode_ranking is EpisodeRanking.HYBRID and s.full_text_rank is FullTextRank.IDF
    assert (s.episode_top_k, s.weight_full_text, s.episode_excerpt_format) == (32, 0.6, ExcerptFormat.TEXT)


@pytest.mark.parametrize("name", ["ranking_profile", "full_text_rank", "episode_ranking", "episode_excerpt_format"])
def test_an_unknown_closed_set_value_fails_at_start(name: str) -> None:
    with pytest.raises(ValueError, match=name):
        Settings(**{name: "nonsense"})  # type: ignore[arg-type]  # a value the setting refuses, on purpose


async def test_the_classic_profile_serves_episodes_by_cosine_as_compact_json(
    runtime: Runtime, migrated: str, subject: str
) -> None:
    rt = Runtime(
        pool=runtime.pool, embedder=runtime.embedder, settings=make_settings(migrated, ranking_profile="classic")
    )
    c = client_for(rt)
    try:
        await assert_fact(c, subject, "garden_plan", "tomatoes by the south wall")
        await record(c, subject, [f"Ann: note {i} about the garden tomatoes" for i in range(12)])
        packet = await context(c, subject, "garden tomatoes")
        episode_rows = decisions(packet, itemKind="EPISODE")
        assert len(episode_rows) == 8  # EPISODE_TOP_K = 8, whatever the budget
        for d in episode_rows:
            assert d["score"] == pytest.approx(d["similarity"])  # cosine alone
        similarities = [d["similarity"] for d in episode_rows]
        assert similarities == sorted(similarities, reverse=True)
        for e in packet["episodes"]:
            assert e["excerpt"].startswith('conversation.message {"')
        # Facts: 0.6 x similarity + 0.25 x full text (ts_rank_cd) + 0.15 x recency.
        (fact,) = decisions(packet, itemKind="FACT")
        assert fact["score"] == pytest.approx(
            0.6 * fact["similarity"] + 0.25 * fact["fullText"] + 0.15 * fact["recency"]
        )
        assert 0 < fact["fullText"] < 1 and math.isclose(fact["recency"], 1.0, abs_tol=1e-3)
    finally:
        await c.http.aclose()


async def test_seed_is_a_deprecated_name_of_classic_in_the_schema(client: GraphQLClient) -> None:
    data = await client.execute(
        '{ __type(name: "RankingProfile") { enumValues(includeDeprecated: true) { name isDeprecated deprecationReason } } }'
    )
    values = {v["name"]: v for v in data["__type"]["enumValues"]}
    assert list(values) == ["DEFAULT", "CLASSIC", "SEED"]
    assert not values["CLASSIC"]["isDeprecated"] and values["SEED"]["isDeprecated"]
    assert "CLASSIC" in values["SEED"]["deprecationReason"]
