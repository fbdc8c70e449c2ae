"""A conversation turn that a served fact cites as its source is left out (CITED_BY_FACT): the
fact says it, and its tokens go to other memory. Only a turn recorded as an event of its own;
never in the `classic` profile, or with HAKI_SKIP_CITED_TURNS=0."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from conftest import GraphQLClient, ProjectClient, client_for, make_settings, new_project_key
from contextlib_helpers import assert_fact, context, decisions, record

from haki_context.core.context import settings_records
from haki_context.core.context.packing import pack_merged, pack_section
from haki_context.core.history import replay
from haki_context.core.history.replay_diff import ChangeKind, ItemChange
from haki_context.core.models import Decision, Event, Fact, FactStatus, ItemKind, ReasonCode, Volatility
from haki_context.core.packet import TraceDecision
from haki_context.core.serving.runtime import Runtime
from haki_context.settings import RankingProfile, Settings

# (name, score, tokens, cited events) for facts; (name, score, tokens, whole turn's event) for turns.
FACTS = [("f1", 0.9, 4, ("e1",)), ("f2", 0.3, 4, ("e3",))]
TURNS = [("t1", 0.8, 4, "e1"), ("t2", 0.6, 4, "e2"), ("t3", 0.4, 4, "e3")]


Item = tuple[str, float, int, Any]  # (name, score, tokens, cited events or the whole turn's event)


def _pack(
    budget: int, facts: list[Item] = FACTS, turns: list[Item] = TURNS, *, skip_restated: bool = False
) -> tuple[Any, Any]:
    """Facts and turns packed as one ranking, each item's citations as given."""
    return pack_merged(
        facts,
        turns,
        score=lambda i: i[1],
        cost=lambda i: i[2],
        budget_left=budget,
        included=ReasonCode.TOP_SCORE,
        cites=lambda f: f[3],
        cited_as=lambda t: t[3],
        skip_restated=skip_restated,
    )


def _merged(budget: int, turns: list[Item] = TURNS) -> list[tuple[str, Decision, ReasonCode]]:
    _, section = _pack(budget, turns=turns)
    return [(v.item[0], v.decision, v.reason) for v in section.verdicts]


def test_a_turn_ranked_below_a_served_fact_citing_it_is_left_out_and_its_budget_goes_on() -> None:
    # f1 (0.9) is served, so t1 (0.8) is left out whatever budget remains, and t2 and t3 fit in 12.
    assert _merged(12) == [
        ("t1", Decision.EXCLUDED, ReasonCode.CITED_BY_FACT),
        ("t2", Decision.INCLUDED, ReasonCode.TOP_SCORE),
        ("t3", Decision.INCLUDED, ReasonCode.TOP_SCORE),
    ]
    # Without the fact's citation t1 takes the budget, and t3 no longer fits.
    assert [v for *_, v in _merged(12, [(n, s, t, None) for n, s, t, _ in TURNS])] == [
        ReasonCode.TOP_SCORE,
        ReasonCode.TOP_SCORE,
        ReasonCode.OVER_BUDGET,
    ]


def test_a_turn_ranked_above_the_fact_citing_it_is_served_and_so_is_the_fact() -> None:
    facts, _ = _pack(100)
    assert [f[0] for f in facts.kept] == ["f1", "f2"]
    assert ("t3", Decision.INCLUDED, ReasonCode.TOP_SCORE) in _merged(100)  # t3 (0.4) before f2 (0.3), which cites it


def test_a_fact_left_out_for_the_budget_hides_no_turn() -> None:
    # f1 (4 tokens) does not fit in 3: t1 is not left out for it; it does not fit either.
    assert _merged(3)[0] == ("t1", Decision.EXCLUDED, ReasonCode.OVER_BUDGET)


def test_a_chunk_that_is_not_a_whole_turn_is_never_left_out_for_a_citation() -> None:
    assert _merged(100, [("t1", 0.8, 4, None)]) == [("t1", Decision.INCLUDED, ReasonCode.TOP_SCORE)]


def test_with_sections_a_turn_cited_by_any_served_fact_is_left_out_and_the_gate_comes_first() -> None:
    served = {"e1"}
    section = pack_section(
        TURNS,
        cost=lambda i: i[2],
        budget_left=100,
        included=ReasonCode.TOP_SCORE,
        gated=lambda t: t[0] == "t2",
        cited=lambda t: t[3] in served,
    )
    assert [(v.item[0], v.reason) for v in section.verdicts] == [
        ("t1", ReasonCode.CITED_BY_FACT),
        ("t2", ReasonCode.BELOW_RELEVANCE_FLOOR),
        ("t3", ReasonCode.TOP_SCORE),
    ]


def test_on_by_default_and_off_in_the_classic_profile() -> None:
    assert Settings().skip_cited_turns and not Settings(ranking_profile=RankingProfile.CLASSIC).skip_cited_turns


def test_a_record_made_before_the_rule_replays_without_it_under_the_same_record() -> None:
    now = settings_records.make_record(Settings(), "m", "s")
    assert now.settings["skip_cited_turns"] is True
    assert settings_records.settings_with(Settings(), now).skip_cited_turns
    # A record made before the setting existed has no such key: its settings decide without
    # the rule, and make the same record again (the same id), as classic's do.
    body = {**now.body, "settings": {k: v for k, v in now.settings.items() if k != "skip_cited_turns"}}
    before = settings_records.SettingsRecord(now.id, body)
    replayed = settings_records.settings_with(Settings(), before)
    assert not replayed.skip_cited_turns
    assert settings_records.make_record(replayed, "m", "s").body == body
    classic = settings_records.make_record(Settings(ranking_profile=RankingProfile.CLASSIC), "m", "s")
    assert "skip_cited_turns" not in classic.settings


# ---------------------------------------------------------------- through GraphQL

QUESTION = "pet: a dog named Rex"  # the fact's own text: it ranks above the turn it cites


async def _remember(client: GraphQLClient, subject: str) -> tuple[str, str, str]:
    """A turn, a fact citing it, and a session of two turns cited by another fact."""
    (turn,) = await record(client, subject, ["I adopted a dog named Rex last May, he is a beagle."])
    await assert_fact(client, subject, "pet", "a dog named Rex", sourceEventIds=[turn])
    data = await client.execute(
        "mutation($i: [EventInput!]!) { recordEvents(inputs: $i) { id } }",
        {
            "i": [
                {
                    "subjectId": subject,
                    "kind": "conversation.session",
                    "payload": {
                        "messages": [
                            {"speaker": "Ann", "text": "My dog named Rex is a beagle."},
                            {"speaker": "Bo", "text": "A dog named Rex, what a good name."},
                        ]
                    },
                }
            ]
        },
    )
    session = data["recordEvents"][0]["id"]
    fact = await assert_fact(client, subject, "pet_breed", "a beagle named Rex", sourceEventIds=[session])
    return turn, session, fact["fact"]["id"]


def _episode_reasons(packet: dict[str, Any], event: str) -> list[str]:
    return [d["reasonCode"] for d in decisions(packet, itemKind="EPISODE", itemId=event)]


async def test_the_turn_a_served_fact_cites_is_left_out_and_traced(project_client: ProjectClient, subject: str) -> None:
    turn, session, _ = await _remember(project_client, subject)
    packet = await context(project_client, subject, QUESTION, budget=900)
    assert any(f["predicate"] == "pet" for f in packet["facts"])
    assert _episode_reasons(packet, turn) == ["CITED_BY_FACT"]
    assert turn not in {e["eventId"] for e in packet["episodes"]}
    # The session's turns stay: the fact citing the session cites one part of it.
    assert set(_episode_reasons(packet, session)) == {"TOP_SCORE"}
    (row,) = decisions(packet, itemKind="EPISODE", itemId=turn)
    assert row["decision"] == "EXCLUDED" and row["rank"] is not None and row["tokens"] > 0
    assert packet["trace"]["counts"]["excluded"] >= 1
    stats = await project_client.execute("{ stats { reasonCodes { reasonCode count } } }")
    counts = {r["reasonCode"]: r["count"] for r in stats["stats"]["reasonCodes"]}
    assert counts["CITED_BY_FACT"] == 1
    trace = await project_client.execute(
        "query($id: ID!) { trace(id: $id) { decisions(itemKind: EPISODE) { itemId reasonCode } } }",
        {"id": packet["traceId"]},
    )
    assert {"itemId": turn, "reasonCode": "CITED_BY_FACT"} in trace["trace"]["decisions"]


async def test_the_turn_is_served_when_the_rule_is_off_or_in_the_classic_profile(
    runtime: Runtime, migrated: str, client: GraphQLClient, subject: str
) -> None:
    turn, _, _ = await _remember(client, subject)
    for changes in ({"skip_cited_turns": False}, {"ranking_profile": "classic"}):
        settings = make_settings(migrated, **changes)  # the profile's values, where not set
        other = client_for(Runtime(pool=runtime.pool, embedder=runtime.embedder, settings=settings))
        try:
            packet = await context(other, subject, QUESTION, budget=900)
        finally:
            await other.http.aclose()
        assert "CITED_BY_FACT" not in {d["reasonCode"] for d in packet["trace"]["decisions"]}, changes
        assert turn in {e["eventId"] for e in packet["episodes"]}, changes


async def test_a_replay_reproduces_the_left_out_turn_and_an_override_serves_it(
    client: GraphQLClient, subject: str
) -> None:
    turn, _, _ = await _remember(client, subject)
    packet = await context(client, subject, QUESTION, budget=900)
    query = """query($id: ID!, $with: ReplayOverrides) { replay(traceId: $id, with: $with) {
        diff { identical changes { itemId kinds after { reasonCode } } } } }"""
    same = await client.execute(query, {"id": packet["traceId"]})
    assert same["replay"]["diff"]["identical"]
    off = await client.execute(query, {"id": packet["traceId"], "with": {"settings": {"skip_cited_turns": False}}})
    changed = {c["itemId"]: c for c in off["replay"]["diff"]["changes"]}
    assert changed[turn]["after"]["reasonCode"] == "TOP_SCORE" and "DECISION_CHANGED" in changed[turn]["kinds"]


async def test_asof_an_instant_before_the_fact_the_turn_is_served(client: GraphQLClient, subject: str) -> None:
    (turn,) = await record(client, subject, ["I adopted a dog named Rex last May, he is a beagle."])
    before = (await context(client, subject, QUESTION, budget=900))["trace"]["createdAt"]
    await assert_fact(client, subject, "pet", "a dog named Rex", sourceEventIds=[turn])
    data = await client.execute(
        "query($s: String!, $q: String!, $t: DateTime) { context(subjectId: $s, query: $q, asOf: $t) {"
        " episodes { eventId } trace { decisions { itemId reasonCode } } } }",
        {"s": subject, "q": QUESTION, "t": before},
    )
    assert turn in {e["eventId"] for e in data["context"]["episodes"]}
    now = await context(client, subject, QUESTION, budget=900)
    assert _episode_reasons(now, turn) == ["CITED_BY_FACT"]


async def test_compared_with_now_a_turn_left_out_for_a_fact_recorded_since_says_so(
    client: GraphQLClient, subject: str
) -> None:
    (turn,) = await record(client, subject, ["I adopted a dog named Rex last May, he is a beagle."])
    before = await context(client, subject, QUESTION, budget=900)
    await assert_fact(client, subject, "pet", "a dog named Rex", sourceEventIds=[turn])
    data = await client.execute(
        "query($id: ID!) { replay(traceId: $id, compareWithNow: true) {"
        " diff { changes { itemId kinds why after { reasonCode } } } } }",
        {"id": before["traceId"]},
    )
    changed = {c["itemId"]: c for c in data["replay"]["diff"]["changes"]}
    assert changed[turn]["after"]["reasonCode"] == "CITED_BY_FACT"
    assert changed[turn]["why"] == "left out: a fact served now cites this turn"


async def test_compared_with_now_a_turn_served_again_once_its_fact_is_retracted_says_so(
    client: GraphQLClient, subject: str
) -> None:
    (turn,) = await record(client, subject, ["I adopted a dog named Rex last May, he is a beagle."])
    fact = await assert_fact(client, subject, "pet", "a dog named Rex", sourceEventIds=[turn])
    stored = await context(client, subject, QUESTION, budget=900)
    assert _episode_reasons(stored, turn) == ["CITED_BY_FACT"]
    await client.execute("mutation($id: ID!) { retractFact(id: $id) { id } }", {"id": fact["fact"]["id"]})
    data = await client.execute(
        "query($id: ID!) { replay(traceId: $id, compareWithNow: true) {"
        " diff { changes { itemId why after { reasonCode } } } } }",
        {"id": stored["traceId"]},
    )
    changed = {c["itemId"]: c for c in data["replay"]["diff"]["changes"]}
    assert changed[turn]["after"]["reasonCode"] == "TOP_SCORE"
    assert changed[turn]["why"] == "no longer left out for a fact citing it"
    assert changed[fact["fact"]["id"]]["why"].startswith("retracted ")


# ---------------------------------------------------------------- a fact whose turns are served


def test_a_fact_ranked_below_the_served_turns_it_cites_is_left_out() -> None:
    facts = [("f1", 0.5, 4, ("e1",)), ("f2", 0.4, 4, ("e1", "e2")), ("f3", 0.3, 4, ("e9",)), ("f4", 0.2, 4, ())]
    turns = [("t1", 0.8, 4, "e1"), ("t2", 0.1, 4, "e2")]
    section, _ = _pack(100, facts, turns, skip_restated=True)
    # f1's only source is served above it; f2's second source only below it; f3's never; f4 cites nothing.
    assert [(v.item[0], v.reason) for v in section.verdicts] == [
        ("f1", ReasonCode.SOURCES_SERVED),
        ("f2", ReasonCode.TOP_SCORE),
        ("f3", ReasonCode.TOP_SCORE),
        ("f4", ReasonCode.TOP_SCORE),
    ]


TURN = "I adopted a dog named Rex last May, he is a beagle."


async def test_with_the_rule_on_a_fact_whose_turn_is_served_above_it_is_left_out_and_traced(
    runtime: Runtime, migrated: str, subject: str
) -> None:
    project = f"project-{uuid.uuid4().hex[:12]}"
    key = await new_project_key(runtime, project)
    settings = make_settings(migrated, skip_restated_facts=True)
    base = client_for(Runtime(pool=runtime.pool, embedder=runtime.embedder, settings=settings))
    client = ProjectClient(base.http, key, project)  # a project of its own: its stats are this test's
    try:
        (turn,) = await record(client, subject, [TURN])
        fact = (await assert_fact(client, subject, "pet", "a dog named Rex", sourceEventIds=[turn]))["fact"]["id"]
        packet = await context(client, subject, f"Ann: {TURN}", budget=900)  # the turn's own words rank it first
        assert turn in {e["eventId"] for e in packet["episodes"]}
        (row,) = decisions(packet, itemKind="FACT", itemId=fact)
        assert (row["decision"], row["reasonCode"]) == ("EXCLUDED", "SOURCES_SERVED") and row["tokens"] > 0
        assert packet["facts"] == []
        stats = await client.execute("{ stats { reasonCodes { reasonCode count } } }")
        assert {"reasonCode": "SOURCES_SERVED", "count": 1} in stats["stats"]["reasonCodes"]
    finally:
        await base.http.aclose()


async def test_by_default_and_in_classic_a_fact_whose_turn_is_served_is_kept(
    runtime: Runtime, migrated: str, client: GraphQLClient, subject: str
) -> None:
    assert (
        not Settings().skip_restated_facts and not Settings(ranking_profile=RankingProfile.CLASSIC).skip_restated_facts
    )
    (turn,) = await record(client, subject, [TURN])
    fact = (await assert_fact(client, subject, "pet", "a dog named Rex", sourceEventIds=[turn]))["fact"]["id"]
    for changes in ({}, {"ranking_profile": "classic"}):
        other = client_for(
            Runtime(pool=runtime.pool, embedder=runtime.embedder, settings=make_settings(migrated, **changes))
        )
        try:
            packet = await context(other, subject, f"Ann: {TURN}", budget=900)
        finally:
            await other.http.aclose()
        assert fact in {f["id"] for f in packet["facts"]}, changes
        assert turn in {e["eventId"] for e in packet["episodes"]}, changes


def _change(before: ReasonCode | None, after: ReasonCode | None, kind: ItemKind) -> ItemChange:
    def row(code: ReasonCode | None) -> TraceDecision | None:
        if code is None:
            return None
        decided = Decision.INCLUDED if code is ReasonCode.TOP_SCORE else Decision.EXCLUDED
        return TraceDecision(kind, "x", None, decided, code, 1, 0.5, 0.5, 0.1, 0.9, 0.5, 5)

    return ItemChange(kind, "x", None, (ChangeKind.DECISION_CHANGED,), row(before), row(after), ())


def test_compared_with_now_a_change_for_what_was_said_already_says_so() -> None:
    then = datetime(2026, 1, 2, tzinfo=UTC)
    fact = Fact(
        "x", "s", "pet", "Rex", None, FactStatus.ACTIVE, Volatility.STABLE, None, None,
        then - timedelta(days=1), None, ("e",), None, 1,
    )  # fmt: skip
    event = Event("x", "s", "conversation.message", {}, then - timedelta(days=1), then - timedelta(days=1), "")
    cases = [
        (ItemKind.FACT, ReasonCode.TOP_SCORE, ReasonCode.SOURCES_SERVED, "left out: the turns it cites are served now"),
        (ItemKind.FACT, ReasonCode.SOURCES_SERVED, ReasonCode.TOP_SCORE, "no longer left out for the turns it cites"),
        (
            ItemKind.EPISODE,
            ReasonCode.TOP_SCORE,
            ReasonCode.CITED_BY_FACT,
            "left out: a fact served now cites this turn",
        ),
        (ItemKind.EPISODE, ReasonCode.CITED_BY_FACT, ReasonCode.TOP_SCORE, "no longer left out for a fact citing it"),
    ]
    for kind, before, after, why in cases:
        change = _change(before, after, kind)
        told = replay._fact_why(change, fact, then) if kind is ItemKind.FACT else replay._event_why(change, event, then)
        assert told == why, (kind, before, after)
