"""Packing under the budget, `rendered`, multi-hop and episodes."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from conftest import GraphQLClient, client_for
from contextlib_helpers import assert_fact, context, decisions, record, with_settings

from haki_context.core.context import assembler
from haki_context.core.serving.runtime import Runtime
from haki_context.db import retrieval


def _line_tokens(line: str) -> int:
    return max(1, len(line) // 4)


async def test_used_tokens_never_exceed_the_budget_and_match_rendered(client: GraphQLClient, subject: str) -> None:
    for i in range(12):
        await assert_fact(client, subject, f"fact_{i}", "word " * (3 + 4 * i), mode="ADD")
    await record(client, subject, [f"episode number {i} about words" for i in range(5)])
    for budget in (1, 10, 40, 120, 900):
        packet = await context(client, subject, "word", budget=budget)
        assert packet["usedTokens"] <= budget
        lines = packet["rendered"].split("\n") if packet["rendered"] else []
        assert len(lines) == len(packet["facts"]) + len(packet["episodes"])
        served = [f["tokens"] for f in packet["facts"]] + [e["tokens"] for e in packet["episodes"]]
        assert served == [_line_tokens(line) for line in lines]
        assert sum(served) == packet["usedTokens"]


async def test_items_that_do_not_fit_are_excluded_over_budget_and_packing_goes_on(
    client: GraphQLClient, subject: str
) -> None:
    long_value = "budget planning " + "long " * 60
    await assert_fact(client, subject, "topic", long_value)
    await assert_fact(client, subject, "topic_short", "budget", mode="ADD")
    packet = await context(client, subject, f"topic: {long_value}", budget=30)
    over = decisions(packet, reasonCode="OVER_BUDGET", itemKind="FACT")
    assert len(over) == 1 and over[0]["rank"] == 1  # the best-scored one is too long...
    assert [f["predicate"] for f in packet["facts"]] == ["topic_short"]  # ...and a smaller one still fits


async def test_facts_come_by_decreasing_score_then_episodes(client: GraphQLClient, subject: str) -> None:
    await assert_fact(client, subject, "a", "red apples and green pears")
    await assert_fact(client, subject, "b", "red apples")
    await record(client, subject, ["I ate red apples yesterday"])
    packet = await context(client, subject, "red apples")
    scores = [f["score"] for f in packet["facts"]]
    assert scores == sorted(scores, reverse=True)
    lines = packet["rendered"].split("\n")
    assert lines[0].startswith("- b: red apples (")  # facts with their dates first
    assert lines[-1].startswith("- [") and "I ate red apples" in lines[-1]  # then dated episodes


async def test_rendered_is_empty_when_nothing_is_served(client: GraphQLClient, subject: str) -> None:
    packet = await context(client, subject, "anything")
    assert packet["rendered"] == "" and packet["usedTokens"] == 0


async def test_multi_hop_expands_once_through_a_shared_entity(runtime: Runtime, subject: str) -> None:
    c = client_for(with_settings(runtime, retrieval_top_k=1))
    try:
        await assert_fact(c, subject, "manager", "Claire runs the office")
        await assert_fact(c, subject, "colleague", "Claire likes espresso with Bruno")
        await assert_fact(c, subject, "friend", "Bruno plays chess")  # two hops away: never reached
        packet = await context(c, subject, "who runs the office")
        assert [(f["predicate"], f["reasonCode"], f["viaEntity"]) for f in packet["facts"]] == [
            ("manager", "TOP_SCORE", None),
            ("colleague", "MULTI_HOP_EXPANSION", "Claire"),
        ]
        hop = decisions(packet, reasonCode="MULTI_HOP_EXPANSION")
        assert hop[0]["viaEntity"] == "Claire" and hop[0]["decision"] == "INCLUDED"
    finally:
        await c.http.aclose()


async def test_multi_hop_statement_is_sent_before_the_episodes_are_scored(
    runtime: Runtime, subject: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It depends on the packed facts only: the episodes' scoring must not delay it.
    events: list[str] = []
    multi_hop, score_chunks = retrieval.multi_hop, assembler._chunks

    async def hop(*args: Any, **kwargs: Any) -> Any:
        events.append("multi-hop sent")
        return await multi_hop(*args, **kwargs)

    def chunks(*args: Any) -> Any:
        events.append("episodes scored")
        return score_chunks(*args)

    monkeypatch.setattr(retrieval, "LIVE", replace(retrieval.LIVE, multi_hop=hop))
    monkeypatch.setattr(assembler, "_chunks", chunks)
    c = client_for(with_settings(runtime, retrieval_top_k=1))
    try:
        await assert_fact(c, subject, "manager", "Claire runs the office")
        await assert_fact(c, subject, "colleague", "Claire likes espresso with Bruno")
        await record(c, subject, ["the office moved"])
        for _ in range(3):  # whichever statement answers first
            events.clear()
            packet = await context(c, subject, "who runs the office")
            assert decisions(packet, reasonCode="MULTI_HOP_EXPANSION")
            assert events == ["multi-hop sent", "episodes scored"]
    finally:
        await c.http.aclose()


async def test_multi_hop_ignores_entities_that_are_words_of_the_query(runtime: Runtime, subject: str) -> None:
    c = client_for(with_settings(runtime, retrieval_top_k=1))
    try:
        await assert_fact(c, subject, "manager", "Claire runs the office")
        await assert_fact(c, subject, "colleague", "Claire likes espresso")
        packet = await context(c, subject, "does claire run the office")
        assert [f["predicate"] for f in packet["facts"]] == ["manager"]
        assert decisions(packet, reasonCode="MULTI_HOP_EXPANSION") == []
    finally:
        await c.http.aclose()


async def test_multi_hop_candidates_that_do_not_fit_are_over_budget(runtime: Runtime, subject: str) -> None:
    c = client_for(with_settings(runtime, retrieval_top_k=1, episode_top_k=0))
    try:
        await assert_fact(c, subject, "manager", "Claire runs the office")
        await assert_fact(c, subject, "colleague", "Claire likes espresso " + "and more " * 20)
        first = await context(c, subject, "who runs the office")
        budget = first["facts"][0]["tokens"] + 2
        packet = await context(c, subject, "who runs the office", budget=budget)
        hop = decisions(packet, viaEntity="Claire")
        assert len(hop) == 1 and hop[0]["reasonCode"] == "OVER_BUDGET" and hop[0]["decision"] == "EXCLUDED"
        assert [f["predicate"] for f in packet["facts"]] == ["manager"]
    finally:
        await c.http.aclose()


async def test_episodes_are_the_closest_chunks_packed_after_facts(client: GraphQLClient, subject: str) -> None:
    ids = await record(client, subject, [f"note {i} about the garden and tomatoes" for i in range(80)])
    packet = await context(client, subject, "garden tomatoes", budget=300)
    episode_rows = decisions(packet, itemKind="EPISODE")
    assert len(episode_rows) == 32  # 300 // 14 candidates is below EPISODE_TOP_K, the floor
    bigger = await context(client, subject, "garden tomatoes", budget=100_000)
    assert len(decisions(bigger, itemKind="EPISODE")) == 64  # EPISODE_MAX_K
    assert all(d["chunk"] == 0 and d["itemId"] in ids for d in episode_rows)
    assert [d["rank"] for d in episode_rows] == list(range(1, 33))
    scores = [e["score"] for e in packet["episodes"]]
    assert scores == sorted(scores, reverse=True)
    for e in packet["episodes"]:
        # A turn is served as its own words: "<speaker>: <text>".
        assert e["chunk"] == 0 and e["kind"] == "conversation.message"
        assert e["excerpt"].startswith("Ann: note ") and len(e["excerpt"]) <= 300


async def test_json_excerpts_are_kind_and_compact_json(runtime: Runtime, subject: str) -> None:
    c = client_for(with_settings(runtime, episode_excerpt_format="json", episode_top_k=8, episode_max_k=8))
    try:
        await record(c, subject, [f"note {i} about the garden" for i in range(12)])
        packet = await context(c, subject, "garden")
        assert len(decisions(packet, itemKind="EPISODE")) == 8
        for e in packet["episodes"]:
            assert e["excerpt"].startswith('conversation.message {"') and len(e["excerpt"]) <= 300
    finally:
        await c.http.aclose()


async def test_long_payload_excerpt_is_cut_to_300_characters(client: GraphQLClient, subject: str) -> None:
    await client.execute(
        'mutation($s: String!, $p: JSON!) { recordEvent(input: {subjectId: $s, kind: "doc", payload: $p}) { id } }',
        {"s": subject, "p": {"body": "lorem ipsum " * 200}},
    )
    packet = await context(client, subject, "lorem ipsum")
    assert len(packet["episodes"]) == 1 and len(packet["episodes"][0]["excerpt"]) == 300


async def test_turns_of_the_speaker_the_query_names_rank_first(runtime: Runtime, subject: str) -> None:
    c = client_for(with_settings(runtime, speaker_boost=0.5))
    try:
        await c.execute(
            "mutation($i: [EventInput!]!) { recordEvents(inputs: $i) { id } }",
            {
                "i": [
                    {
                        "subjectId": subject,
                        "kind": "conversation.message",
                        "payload": {"speaker": "Bruno", "text": "I went hiking"},
                    },
                    {
                        "subjectId": subject,
                        "kind": "conversation.message",
                        "payload": {"speaker": "Claire Dubois", "text": "I went hiking"},
                    },
                ]
            },
        )
        packet = await context(c, subject, "Where did Claire Dubois go?")
        assert packet["episodes"][0]["excerpt"] == "Claire Dubois: I went hiking"
        assert packet["episodes"][0]["score"] - packet["episodes"][1]["score"] >= 0.5 - 1e-9
        other = await context(c, subject, "Where did Bruno go?")
        assert other["episodes"][0]["excerpt"] == "Bruno: I went hiking"
    finally:
        await c.http.aclose()
