"""The recall gate (HAKI_RECALL_MAX_DISTANCE > 0) and its empty reason."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from conftest import GraphQLClient, client_for
from contextlib_helpers import assert_fact, context, decisions, record, with_settings

from haki_context.core.serving.runtime import Runtime


@pytest.fixture
async def gated(runtime: Runtime) -> AsyncIterator[GraphQLClient]:

    c = client_for(with_settings(runtime, recall_max_distance=0.5))
    yield c
    await c.http.aclose()


async def test_gate_emptying_the_packet_says_no_relevant_memory(gated: GraphQLClient, subject: str) -> None:
    await assert_fact(gated, subject, "hobby", "plays the violin every sunday")
    await record(gated, subject, ["we talked about gardening tools"])
    packet = await context(gated, subject, "quarterly revenue forecast spreadsheet")
    assert packet["facts"] == [] and packet["episodes"] == []
    assert packet["emptyReason"] == "NO_RELEVANT_MEMORY"
    assert packet["status"] == "OK" and packet["warnings"] == []
    assert packet["rendered"] == ""
    excluded = decisions(packet, decision="EXCLUDED")
    assert {d["reasonCode"] for d in excluded} == {"BELOW_RELEVANCE_FLOOR"}
    assert {d["itemKind"] for d in excluded} == {"FACT", "EPISODE"}
    assert all(d["distance"] > 0.5 for d in excluded)


async def test_gate_keeps_what_is_close(gated: GraphQLClient, subject: str) -> None:
    await assert_fact(gated, subject, "hobby", "plays the violin")
    await assert_fact(gated, subject, "job", "quarterly revenue forecast")
    packet = await context(gated, subject, "job: quarterly revenue forecast")
    assert [f["predicate"] for f in packet["facts"]] == ["job"]
    assert packet["emptyReason"] is None


async def test_a_subject_without_memory_says_no_memory(gated: GraphQLClient, subject: str) -> None:
    packet = await context(gated, subject, "anything at all")
    assert packet["emptyReason"] == "NO_MEMORY" and packet["facts"] == [] and packet["rendered"] == ""
    assert packet["status"] == "OK" and packet["trace"]["emptyReason"] == "NO_MEMORY"
    assert packet["trace"]["decisions"] == []


async def test_a_budget_too_small_for_anything_says_so(client: GraphQLClient, subject: str) -> None:
    await assert_fact(client, subject, "invoice_language", "French")
    await record(client, subject, ["Please send my invoices in French."])
    packet = await context(client, subject, "Which language should invoices use?", budget=1)
    assert packet["rendered"] == "" and packet["facts"] == [] and packet["episodes"] == []
    assert packet["emptyReason"] == "BUDGET_TOO_SMALL" and packet["trace"]["emptyReason"] == "BUDGET_TOO_SMALL"
    over = decisions(packet, reasonCode="OVER_BUDGET")
    assert {d["itemKind"] for d in over} == {"FACT", "EPISODE"} and all(d["tokens"] > 1 for d in over)
    served = await context(client, subject, "Which language should invoices use?", budget=900)
    assert served["emptyReason"] is None and served["rendered"] != ""


async def test_only_the_gate_counts_as_no_relevant_memory_in_stats(gated: GraphQLClient, subject: str) -> None:
    """stats' noRelevantMemoryCalls counts the calls the gate emptied, not the other empty ones."""
    since = (await gated.execute("{ stats { noRelevantMemoryCalls } }"))["stats"]["noRelevantMemoryCalls"]
    await context(gated, subject, "nothing recorded yet")  # NO_MEMORY
    await assert_fact(gated, subject, "hobby", "plays the violin every sunday")
    await context(gated, subject, "plays the violin", budget=1)  # BUDGET_TOO_SMALL
    await context(gated, subject, "quarterly revenue forecast spreadsheet")  # NO_RELEVANT_MEMORY
    after = (await gated.execute("{ stats { noRelevantMemoryCalls } }"))["stats"]["noRelevantMemoryCalls"]
    assert after - since == 1


async def test_gate_off_by_default_serves_the_same_memory(client: GraphQLClient, subject: str) -> None:
    await assert_fact(client, subject, "hobby", "plays the violin every sunday")
    packet = await context(client, subject, "quarterly revenue forecast spreadsheet")
    assert [f["predicate"] for f in packet["facts"]] == ["hobby"]
    assert packet["emptyReason"] is None


async def test_multi_hop_rows_are_never_gated(runtime: Runtime, subject: str) -> None:
    c = client_for(with_settings(runtime, recall_max_distance=0.5, retrieval_top_k=1))
    try:
        await assert_fact(c, subject, "manager", "Claire runs the office")
        await assert_fact(c, subject, "colleague", "Claire likes espresso coffee")
        packet = await context(c, subject, "manager runs the office")
        hop = [f for f in packet["facts"] if f["reasonCode"] == "MULTI_HOP_EXPANSION"]
        assert [f["predicate"] for f in hop] == ["colleague"]
        assert decisions(packet, reasonCode="MULTI_HOP_EXPANSION")[0]["distance"] > 0.5
    finally:
        await c.http.aclose()
