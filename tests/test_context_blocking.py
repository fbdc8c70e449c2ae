"""Blocking: open conflicts and expired volatility, with their warnings and DEGRADED status."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from conftest import GraphQLClient, client_for
from contextlib_helpers import assert_fact, context, decisions, with_settings

from haki_context.core.serving.runtime import Runtime

OPEN_WARNING = "open_conflict: {n} fact(s) hidden pending conflict resolution"
EXPIRED_WARNING = "volatility_expired: {n} fact(s) hidden past their volatility horizon"


def _days_ago(days: float) -> str:
    return (datetime.now(UTC) - timedelta(days=days)).isoformat()


async def test_open_conflict_blocks_every_member(client: GraphQLClient, subject: str) -> None:
    await assert_fact(client, subject, "invoice_language", "French")
    contested = await assert_fact(client, subject, "invoice_language", "German", mode="CONTEST")
    await assert_fact(client, subject, "hobby", "violin")
    packet = await context(client, subject, "something entirely unrelated like the weather")
    blocked = decisions(packet, decision="BLOCKED")
    assert len(blocked) == 2
    assert {d["reasonCode"] for d in blocked} == {"CONFLICT_OPEN"}
    assert all(d["rank"] is None and d["score"] is None for d in blocked)
    assert [f["predicate"] for f in packet["facts"]] == ["hobby"]
    assert packet["warnings"] == [OPEN_WARNING.format(n=2)]
    assert packet["status"] == "DEGRADED"
    assert packet["trace"]["counts"]["blocked"] == 2

    await client.execute(
        "mutation($id: ID!) { dismissConflict(id: $id) { status } }", {"id": contested["conflict"]["id"]}
    )
    after = await context(client, subject, "invoice language")
    assert {f["value"] for f in after["facts"] if f["predicate"] == "invoice_language"} == {"French", "German"}
    assert after["status"] == "OK" and after["warnings"] == []


async def test_expired_volatile_facts_are_blocked_and_fresh_ones_served(client: GraphQLClient, subject: str) -> None:
    await assert_fact(client, subject, "mood", "tired", volatility="EPHEMERAL", validFrom=_days_ago(10))
    await assert_fact(client, subject, "project", "apollo", volatility="VOLATILE", validFrom=_days_ago(10))
    await assert_fact(client, subject, "diet", "vegan", volatility="VOLATILE", validFrom=_days_ago(61))
    await assert_fact(client, subject, "name", "Ann", volatility="SLOW", validFrom=_days_ago(400))
    packet = await context(client, subject, "mood project diet name")
    blocked = decisions(packet, decision="BLOCKED")
    assert {d["reasonCode"] for d in blocked} == {"VOLATILITY_EXPIRED"}
    assert len(blocked) == 2  # EPHEMERAL after 7 days, VOLATILE after 60 days
    assert {f["predicate"] for f in packet["facts"]} == {"project", "name"}  # SLOW is served past its horizon
    assert packet["warnings"] == [EXPIRED_WARNING.format(n=2)]
    assert packet["status"] == "DEGRADED"


async def test_reinforcing_restarts_the_volatility_clock(client: GraphQLClient, subject: str) -> None:
    await assert_fact(client, subject, "mood", "tired", volatility="EPHEMERAL", validFrom=_days_ago(10))
    assert (await context(client, subject, "mood"))["facts"] == []
    await assert_fact(client, subject, "mood", "tired", volatility="EPHEMERAL")  # equal value: reinforced now
    assert [f["predicate"] for f in (await context(client, subject, "mood"))["facts"]] == ["mood"]


async def test_both_warnings_with_their_counts(client: GraphQLClient, subject: str) -> None:
    await assert_fact(client, subject, "a", "one")
    await assert_fact(client, subject, "a", "two", mode="CONTEST")
    await assert_fact(client, subject, "a", "three", mode="CONTEST")
    await assert_fact(client, subject, "b", "four", volatility="EPHEMERAL", validFrom=_days_ago(8))
    packet = await context(client, subject, "a b")
    assert packet["warnings"] == [OPEN_WARNING.format(n=3), EXPIRED_WARNING.format(n=1)]
    assert packet["status"] == "DEGRADED"


async def test_status_is_ok_without_warnings(client: GraphQLClient, subject: str) -> None:
    await assert_fact(client, subject, "a", "one")
    packet = await context(client, subject, "a")
    assert packet["warnings"] == [] and packet["status"] == "OK"


async def test_trace_lists_blocked_facts_up_to_its_limit_and_the_warning_counts_them_all(
    runtime: Runtime, subject: str
) -> None:
    client = client_for(with_settings(runtime, blocked_trace_limit=2))
    try:
        for predicate in ("a", "b"):
            await assert_fact(client, subject, predicate, "one")
            await assert_fact(client, subject, predicate, "two", mode="CONTEST")
            await assert_fact(client, subject, predicate, "three", mode="CONTEST")
        packet = await context(client, subject, "a b")
        blocked = decisions(packet, decision="BLOCKED")
        assert len(blocked) == 2 and packet["trace"]["counts"]["blocked"] == 2  # the trace's cap
        assert packet["warnings"] == [OPEN_WARNING.format(n=6)]  # every member of both open sets
    finally:
        await client.http.aclose()
