"""How facts and episodes share a packet's budget: one ranking by default, facts first in `classic`."""

from __future__ import annotations

from conftest import client_for, make_settings
from contextlib_helpers import assert_fact, context, decisions, record

from haki_context.core.context.packing import pack_merged
from haki_context.core.models import Decision, ReasonCode
from haki_context.core.serving.runtime import Runtime
from haki_context.settings import Packing, RankingProfile, Settings


def test_merged_packing_takes_items_of_both_kinds_by_decreasing_score() -> None:
    facts = [("f1", 0.9, 4), ("f2", 0.5, 4), ("f3", 0.2, 4)]
    chunks = [("c1", 0.7, 4), ("c2", 0.5, 4), ("c3", 0.4, 20)]
    fact_section, chunk_section = pack_merged(
        facts,
        chunks,
        score=lambda i: i[1],
        cost=lambda i: i[2],
        budget_left=16,
        included=ReasonCode.TOP_SCORE,
        gated=lambda i: i[0] == "c2",
    )
    # f1 (0.9), c1 (0.7), f2 (0.5, before the gated c2); c3 is too big; f3 still fits
    assert [f[0] for f in fact_section.kept] == ["f1", "f2", "f3"]
    assert [c[0] for c in chunk_section.kept] == ["c1"]
    assert fact_section.left == chunk_section.left == 0
    # each section's verdicts keep its own rank order
    assert [(v.item[0], v.decision, v.reason) for v in chunk_section.verdicts] == [
        ("c1", Decision.INCLUDED, ReasonCode.TOP_SCORE),
        ("c2", Decision.EXCLUDED, ReasonCode.BELOW_RELEVANCE_FLOOR),
        ("c3", Decision.EXCLUDED, ReasonCode.OVER_BUDGET),
    ]


def test_merged_packing_serves_a_fact_before_an_episode_of_the_same_score() -> None:
    fact_section, chunk_section = pack_merged(
        [("f", 0.5, 5)],
        [("c", 0.5, 5)],
        score=lambda i: i[1],
        cost=lambda i: i[2],
        budget_left=5,
        included=ReasonCode.TOP_SCORE,
    )
    assert [f[0] for f in fact_section.kept] == ["f"] and chunk_section.kept == []


def test_facts_share_one_ranking_with_episodes_by_default_and_come_first_in_classic() -> None:
    assert Settings().packing is Packing.MERGED
    assert Settings(ranking_profile=RankingProfile.CLASSIC).packing is Packing.SECTIONS


async def _crowded(runtime: Runtime, migrated: str, subject: str, packing: str) -> dict:  # type: ignore[type-arg]
    rt = Runtime(pool=runtime.pool, embedder=runtime.embedder, settings=make_settings(migrated, packing=packing))
    c = client_for(rt)
    try:
        for i in range(30):
            await assert_fact(c, subject, f"garden_note_{i}", f"the tomatoes in bed {i} need water on day {i}")
        await record(c, subject, ["the blue kayak is kept in the north shed"])
        return await context(c, subject, "where is the blue kayak kept", budget=120)
    finally:
        await c.http.aclose()


async def test_facts_that_answer_worse_do_not_crowd_out_the_turn_that_answers(
    runtime: Runtime, migrated: str, subject: str
) -> None:
    packet = await _crowded(runtime, migrated, subject, "merged")
    assert [e["excerpt"] for e in packet["episodes"]] == ["Ann: the blue kayak is kept in the north shed"]
    assert 0 < len(packet["facts"]) < 30 and packet["usedTokens"] <= 120
    rows = decisions(packet)
    assert len(decisions(packet, itemKind="FACT")) == 30  # every candidate is still traced
    (episode,) = decisions(packet, itemKind="EPISODE", decision="INCLUDED")
    assert all(episode["score"] > d["score"] for d in rows if d["itemKind"] == "FACT")
    cut = decisions(packet, itemKind="FACT", reasonCode="OVER_BUDGET")
    assert cut and len(cut) + len(packet["facts"]) == 30  # what the budget cut says so
    assert min(f["score"] for f in packet["facts"]) >= max(d["score"] for d in cut)


async def test_with_sections_the_facts_fill_the_budget_before_any_episode(
    runtime: Runtime, migrated: str, subject: str
) -> None:
    packet = await _crowded(runtime, migrated, subject, "sections")
    assert packet["episodes"] == []
    (episode,) = decisions(packet, itemKind="EPISODE")
    assert episode["reasonCode"] == "OVER_BUDGET"
