"""What a trace says its call served: `ContextTrace.rendered` is the packet's own text, rebuilt by
the server's renderer, and `TraceDecision.overallRank` is the order the call packed its items in."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from conftest import GraphQLClient, client_for
from contextlib_helpers import assert_fact, with_settings

from haki_context.core.serving.runtime import Runtime

CONTEXT = """
query($s: String!, $q: String!, $b: Int, $at: DateTime) {
  context(subjectId: $s, query: $q, budget: $b, asOf: $at) {
    traceId rendered
    trace {
      rendered
      decisions { itemKind itemId chunk decision reasonCode rank overallRank score viaEntity }
    }
  }
}
"""

TRACE = """
query($id: ID!) {
  trace(id: $id) {
    rendered
    decisions { itemKind itemId chunk decision reasonCode rank overallRank score viaEntity }
    included: decisions(decision: INCLUDED) { itemId overallRank }
  }
}
"""

TURNS = [
    ("Ann", "Please send my invoices in French from now on."),
    ("Agent", "Noted: invoices in French from now on."),
    ("Ann", "My dog Rex loves the beach near Cascais."),
    ("Bruno", "The team meeting on Tuesday moved to 3 pm."),
]


async def remember(client: GraphQLClient, subject: str) -> list[str]:
    """A conversation of four turns and three facts; the turns' event ids."""
    data = await client.execute(
        "mutation($i: [EventInput!]!) { recordEvents(inputs: $i) { id } }",
        {
            "i": [
                {"subjectId": subject, "kind": "conversation.message", "payload": {"speaker": who, "text": text}}
                for who, text in TURNS
            ]
        },
    )
    await assert_fact(client, subject, "invoice_language", "French")
    await assert_fact(client, subject, "pet", "a dog named Rex")
    await assert_fact(client, subject, "address", {"city": "Lisbon", "street": "Rua Augusta 1"})
    return [e["id"] for e in data["recordEvents"]]


async def ask(
    client: GraphQLClient, subject: str, query: str, budget: int | None = None, as_of: datetime | None = None
) -> dict[str, Any]:
    data = await client.execute(
        CONTEXT, {"s": subject, "q": query, "b": budget, "at": as_of.isoformat() if as_of else None}
    )
    packet: dict[str, Any] = data["context"]
    return packet


async def stored(client: GraphQLClient, trace_id: str) -> dict[str, Any]:
    trace: dict[str, Any] = (await client.execute(TRACE, {"id": trace_id}))["trace"]
    return trace


def in_overall_order(decisions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    ranked = sorted((d for d in decisions if d["overallRank"] is not None), key=lambda d: d["overallRank"])
    assert [d["overallRank"] for d in ranked] == list(range(1, len(ranked) + 1))
    assert all(d["overallRank"] is None for d in decisions if d["rank"] is None)
    return ranked


async def test_a_trace_renders_exactly_the_text_its_packet_served(client: GraphQLClient, subject: str) -> None:
    await remember(client, subject)
    for query, budget in (("Which language should invoices use?", None), ("Rex the dog", 40), ("Tuesday", 900)):
        packet = await ask(client, subject, query, budget)
        assert packet["trace"]["rendered"] == packet["rendered"], query  # the call's own trace, same request
        assert (await stored(client, packet["traceId"]))["rendered"] == packet["rendered"], query
    # Facts and turns alike: a turn is served in its speaker's words, not as its event's JSON.
    packet = await ask(client, subject, "Which language should invoices use?")
    assert "- invoice language: French (" in packet["rendered"]
    assert "] Ann: Please send my invoices in French from now on." in packet["rendered"]
    assert "conversation.message {" not in packet["rendered"]


async def test_an_as_of_call_renders_the_text_it_served_then(client: GraphQLClient, subject: str) -> None:
    await remember(client, subject)
    then = datetime.now(UTC)
    await assert_fact(client, subject, "invoice_language", "German")  # supersedes French
    packet = await ask(client, subject, "Which language should invoices use?", as_of=then)
    assert "- invoice language: French (" in packet["rendered"] and "German" not in packet["rendered"]
    assert (await stored(client, packet["traceId"]))["rendered"] == packet["rendered"]


async def test_a_trace_renders_under_the_settings_its_call_ran_under(
    runtime: Runtime, client: GraphQLClient, subject: str
) -> None:
    await remember(client, subject)
    as_text = await ask(client, subject, "Which language should invoices use?")
    as_json_client = client_for(with_settings(runtime, episode_excerpt_format="json"))
    try:
        as_json = await ask(as_json_client, subject, "Which language should invoices use?")
        assert 'conversation.message {"speaker":"Ann"' in as_json["rendered"]
        # Each trace as its own call served it, whichever server reads it back.
        for reader in (client, as_json_client):
            assert (await stored(reader, as_text["traceId"]))["rendered"] == as_text["rendered"]
            assert (await stored(reader, as_json["traceId"]))["rendered"] == as_json["rendered"]
    finally:
        await as_json_client.http.aclose()


async def test_a_trace_that_served_nothing_renders_empty_and_one_whose_item_is_gone_null(
    runtime: Runtime, client: GraphQLClient, subject: str
) -> None:
    empty = await ask(client, f"{subject}-none", "anything at all")
    assert empty["rendered"] == "" and (await stored(client, empty["traceId"]))["rendered"] == ""

    events = await remember(client, subject)
    packet = await ask(client, subject, "Which language should invoices use?")
    served = {d["itemId"] for d in packet["trace"]["decisions"] if d["decision"] == "INCLUDED"}
    gone = next(e for e in events if e in served)
    async with runtime.pool.acquire() as conn:  # an episode no longer stored
        await conn.execute("DELETE FROM episode_chunks WHERE event_id = $1", uuid.UUID(gone))
    assert (await stored(client, packet["traceId"]))["rendered"] is None


async def test_overall_ranks_follow_one_ranking_of_facts_and_episodes_under_merged_packing(
    client: GraphQLClient, subject: str
) -> None:
    await remember(client, subject)
    packet = await ask(client, subject, "Please send my invoices in French from now on.", budget=60)
    trace = await stored(client, packet["traceId"])
    assert trace["decisions"] == packet["trace"]["decisions"]
    order = in_overall_order(trace["decisions"])
    # One ranking across kinds: by decreasing score, each kind in its own rank order.
    assert [d["score"] for d in order] == sorted((d["score"] for d in order), reverse=True)
    for kind in ("FACT", "EPISODE"):
        assert [d["rank"] for d in order if d["itemKind"] == kind] == sorted(
            d["rank"] for d in order if d["itemKind"] == kind
        )
    kinds = [d["itemKind"] for d in order]
    assert kinds[0] == "EPISODE" and "FACT" in kinds[1:3], kinds  # the turn asked about, then the fact
    # A filtered list keeps the places numbered over every decision.
    assert trace["included"] == [
        {"itemId": d["itemId"], "overallRank": d["overallRank"]}
        for d in trace["decisions"]
        if d["decision"] == "INCLUDED"
    ]


@pytest.mark.parametrize("packing", ["merged", "sections"])
async def test_multi_hop_facts_rank_after_the_main_pack_and_sections_keep_kinds_apart(
    runtime: Runtime, subject: str, packing: str
) -> None:
    packed_by = client_for(with_settings(runtime, packing=packing, retrieval_top_k=1))
    try:
        await remember(packed_by, subject)
        # The top fact (one candidate a search) names Claire, whom the second fact names too.
        await assert_fact(packed_by, subject, "manager", "Claire runs the office")
        await assert_fact(packed_by, subject, "colleague", "Claire likes espresso with Bruno")
        await assert_fact(packed_by, subject, "a", "one")
        await assert_fact(packed_by, subject, "a", "two", mode="CONTEST")  # a blocked pair
        packet = await ask(packed_by, subject, "who runs the office")
        order = in_overall_order((await stored(packed_by, packet["traceId"]))["decisions"])
        groups = ["hop" if d["viaEntity"] else d["itemKind"] for d in order]
        assert {"FACT", "hop", "EPISODE"} <= set(groups), groups
        if packing == "sections":  # facts, then multi-hop facts, then episodes
            assert groups == sorted(groups, key=["FACT", "hop", "EPISODE"].index), groups
        else:  # the one ranking of facts and episodes, then the multi-hop facts in what is left
            assert groups == sorted(groups, key=lambda g: g == "hop"), groups
        assert (await stored(packed_by, packet["traceId"]))["rendered"] == packet["rendered"]
    finally:
        await packed_by.http.aclose()


async def test_a_replay_renders_both_packets_and_ranks_both_sides_of_its_diff(
    client: GraphQLClient, subject: str
) -> None:
    await remember(client, subject)
    packet = await ask(client, subject, "Which language should invoices use?")
    data = await client.execute(
        """query($id: ID!) { replay(traceId: $id, with: {budget: 20}) {
             original { rendered }
             packet { rendered trace { rendered decisions { overallRank rank } } }
             diff { changes { before { overallRank rank } after { overallRank rank } } }
           } }""",
        {"id": packet["traceId"]},
    )
    replayed = data["replay"]
    assert replayed["original"]["rendered"] == packet["rendered"]
    assert replayed["packet"]["trace"]["rendered"] == replayed["packet"]["rendered"]  # a trace never written
    in_overall_order(replayed["packet"]["trace"]["decisions"])
    sides = [c[side] for c in replayed["diff"]["changes"] for side in ("before", "after") if c[side]]
    assert sides and all((s["overallRank"] is None) == (s["rank"] is None) for s in sides)
