"""What is said twice is served once: an item whose text is the same as one served above it is
EXCLUDED SAME_TEXT_SERVED (HAKI_SKIP_REPEATED_TEXTS), and the trace says so."""

from __future__ import annotations

import uuid

from conftest import GraphQLClient, ProjectClient, client_for, make_settings, new_project_key
from contextlib_helpers import context, decisions, record, with_settings

from haki_context.core.context.packing import pack_merged, pack_section, same_text
from haki_context.core.models import Decision, ReasonCode
from haki_context.core.serving.runtime import Runtime
from haki_context.settings import RankingProfile, Settings

# The README's first session: two turns, recorded twice as a user running it twice does.
SESSION = ["Please send my invoices in French.", "Noted: invoices in French from now on."]
QUESTION = "Which language should invoices use?"


def test_same_text_ignores_spacing_and_case_only() -> None:
    assert same_text("Ann:  Please send my\ninvoices.") == same_text("ann: please send my invoices.")
    assert same_text("Ann: Please send my invoices.") != same_text("Ann: Please send my invoice.")


def test_a_section_serves_a_repeated_text_once_and_spends_no_budget_on_it() -> None:
    items = [("a", "Rex is a beagle"), ("b", "rex is  a BEAGLE"), ("c", "Rex likes the beach"), ("d", "old")]
    section = pack_section(
        items, cost=lambda _: 4, budget_left=8, included=ReasonCode.TOP_SCORE, text_of=lambda i: i[1], said={"old"}
    )
    assert [(v.item[0], v.decision, v.reason) for v in section.verdicts] == [
        ("a", Decision.INCLUDED, ReasonCode.TOP_SCORE),
        ("b", Decision.EXCLUDED, ReasonCode.SAME_TEXT_SERVED),
        ("c", Decision.INCLUDED, ReasonCode.TOP_SCORE),
        ("d", Decision.EXCLUDED, ReasonCode.SAME_TEXT_SERVED),  # served by an earlier section
    ]
    off = pack_section(items, cost=lambda _: 4, budget_left=8, included=ReasonCode.TOP_SCORE)
    assert [v.reason for v in off.verdicts][:2] == [ReasonCode.TOP_SCORE, ReasonCode.TOP_SCORE]


def test_a_copy_is_left_out_only_when_the_first_was_served() -> None:
    """A copy ranked below a first one too big for the budget is not a repeat: nothing was served."""
    items = [("big", "same words", 10), ("copy", "same words", 10), ("small", "other", 2)]
    section = pack_section(
        items, cost=lambda i: i[2], budget_left=5, included=ReasonCode.TOP_SCORE, text_of=lambda i: i[1]
    )
    assert [v.reason for v in section.verdicts] == [
        ReasonCode.OVER_BUDGET,
        ReasonCode.OVER_BUDGET,
        ReasonCode.TOP_SCORE,
    ]


def test_one_ranking_leaves_out_the_lower_copy_whichever_its_kind() -> None:
    facts = [("f1", 0.4, "Rex is a beagle")]
    turns = [("t1", 0.9, "Rex is a beagle"), ("t2", 0.5, "Rex is a beagle"), ("t3", 0.3, "Rex likes the beach")]
    fact_section, turn_section = pack_merged(
        facts,
        turns,
        score=lambda i: i[1],
        cost=lambda _: 4,
        budget_left=100,
        included=ReasonCode.TOP_SCORE,
        text_of=lambda i: i[2],
    )
    assert [v.reason for v in turn_section.verdicts] == [
        ReasonCode.TOP_SCORE,
        ReasonCode.SAME_TEXT_SERVED,
        ReasonCode.TOP_SCORE,
    ]
    assert [v.reason for v in fact_section.verdicts] == [ReasonCode.SAME_TEXT_SERVED]
    assert turn_section.left == 100 - 8


async def test_the_same_session_recorded_twice_is_served_once_and_traced(
    runtime: Runtime, migrated: str, subject: str
) -> None:
    project = f"project-{uuid.uuid4().hex[:12]}"
    key = await new_project_key(runtime, project)
    base = client_for(Runtime(pool=runtime.pool, embedder=runtime.embedder, settings=make_settings(migrated)))
    client = ProjectClient(base.http, key, project)  # a project of its own: its stats are this test's
    try:
        first = await record(client, subject, SESSION)
        second = await record(client, subject, SESSION)
        packet = await context(client, subject, QUESTION, budget=900)
        served = [e["excerpt"] for e in packet["episodes"]]
        assert sorted(served) == sorted(f"Ann: {t}" for t in SESSION)  # each text once
        assert packet["rendered"].count("Please send my invoices in French.") == 1
        repeats = decisions(packet, reasonCode="SAME_TEXT_SERVED")
        assert len(repeats) == 2 and {d["decision"] for d in repeats} == {"EXCLUDED"}
        assert {d["itemId"] for d in repeats} <= set(first + second)
        included = decisions(packet, decision="INCLUDED", itemKind="EPISODE")
        for repeat in repeats:  # each ranked below a served copy of its text
            assert any(d["rank"] < repeat["rank"] and d["tokens"] == repeat["tokens"] for d in included)
        stats = await client.execute("{ stats { reasonCodes { reasonCode count } } }")
        assert {"reasonCode": "SAME_TEXT_SERVED", "count": 2} in stats["stats"]["reasonCodes"]
    finally:
        await base.http.aclose()


async def test_with_the_rule_off_a_repeated_text_is_served_again(runtime: Runtime, subject: str) -> None:
    c = client_for(with_settings(runtime, skip_repeated_texts=False))
    try:
        await record(c, subject, SESSION)
        await record(c, subject, SESSION)
        packet = await context(c, subject, QUESTION, budget=900)
        assert packet["rendered"].count("Please send my invoices in French.") == 2
        assert decisions(packet, reasonCode="SAME_TEXT_SERVED") == []
    finally:
        await c.http.aclose()


def test_the_rule_is_on_by_default_and_off_in_the_plain_profile() -> None:
    assert Settings().skip_repeated_texts
    others = [p for p in RankingProfile if p is not RankingProfile.DEFAULT]
    assert others and all(not Settings(ranking_profile=p).skip_repeated_texts for p in others)


async def test_compared_with_now_a_turn_left_out_for_its_copy_recorded_since_says_so(
    client: GraphQLClient, subject: str
) -> None:
    (first, _) = await record(client, subject, SESSION)
    before = await context(client, subject, QUESTION, budget=900)
    assert first in {e["eventId"] for e in before["episodes"]}
    (copy, _) = await record(client, subject, SESSION)  # newer: it ranks above the first now
    data = await client.execute(
        "query($id: ID!) { replay(traceId: $id, compareWithNow: true) {"
        " diff { changes { itemId why before { reasonCode } after { reasonCode } } } } }",
        {"id": before["traceId"]},
    )
    changed = {c["itemId"]: c for c in data["replay"]["diff"]["changes"]}
    assert changed[first]["after"]["reasonCode"] == "SAME_TEXT_SERVED"
    assert changed[first]["why"] == "left out: the same text is served above it now"
    assert changed[copy]["before"] is None and changed[copy]["why"].endswith("after the call")
