"""The recall gate (HAKI_RECALL_MAX_DISTANCE > 0) and its empty reason."""

from __future__ import annotations

import pytest
from conftest import GraphQLClient, client_for
from contextlib_helpers import assert_fact, context, decisions, record, with_settings

from haki_context.core.runtime import Runtime


@pytest.fixture
async def gated(runtime: Runtime):
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


async def test_subject_without_memory_has_no_empty_reason(gated: GraphQLClient, subject: str) -> None:
    packet = await context(gated, subject, "anything at all")
    assert packet["emptyReason"] is None and packet["facts"] == [] and packet["rendered"] == ""


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
