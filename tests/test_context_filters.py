"""Hard filters run inside SQL before scoring; each has a positive control."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from conftest import GraphQLClient
from contextlib_helpers import assert_fact, context, decisions


def _iso(delta_days: float) -> str:
    return (datetime.now(UTC) + timedelta(days=delta_days)).isoformat()


def served(packet: dict[str, Any]) -> set[str]:

    return {f["predicate"] for f in packet["facts"]}


async def test_retracted_fact_is_never_considered(client: GraphQLClient, subject: str) -> None:
    fact = await assert_fact(client, subject, "invoice_language", "French")
    assert served(await context(client, subject, "invoice language")) == {"invoice_language"}  # control
    await client.execute("mutation($id: ID!) { retractFact(id: $id) { status } }", {"id": fact["fact"]["id"]})
    packet = await context(client, subject, "invoice language")
    assert served(packet) == set()
    assert decisions(packet, itemKind="FACT") == []


async def test_superseded_fact_is_not_served_but_its_successor_is(client: GraphQLClient, subject: str) -> None:
    await assert_fact(client, subject, "city", "Paris")
    assert [f["value"] for f in (await context(client, subject, "city"))["facts"]] == ["Paris"]  # control
    await assert_fact(client, subject, "city", "Lyon")
    assert [f["value"] for f in (await context(client, subject, "city"))["facts"]] == ["Lyon"]


async def test_scope_is_the_exact_subject(client: GraphQLClient, subject: str) -> None:
    await assert_fact(client, subject, "invoice_language", "French")
    assert served(await context(client, subject + "-other", "invoice language")) == set()
    assert served(await context(client, subject[:-1], "invoice language")) == set()
    assert served(await context(client, subject, "invoice language")) == {"invoice_language"}  # control


async def test_fact_whose_valid_to_passed_is_never_considered(client: GraphQLClient, subject: str) -> None:
    await assert_fact(client, subject, "old_plan", "basic", validFrom=_iso(-10), validTo=_iso(-1), mode="ADD")
    await assert_fact(client, subject, "new_plan", "premium", validFrom=_iso(-10), validTo=_iso(30), mode="ADD")
    packet = await context(client, subject, "plan")
    assert served(packet) == {"new_plan"}  # the control with a validTo still ahead is served
    ids = {d["itemId"] for d in decisions(packet, itemKind="FACT")}
    assert len(ids) == 1  # the expired one is not even a candidate


async def test_fact_valid_from_the_future_is_not_served_yet(client: GraphQLClient, subject: str) -> None:
    await assert_fact(client, subject, "next_plan", "gold", validFrom=_iso(5))
    await assert_fact(client, subject, "this_plan", "silver", validFrom=_iso(-5))
    packet = await context(client, subject, "plan")
    assert served(packet) == {"this_plan"}  # control: a validFrom in the past is served
    assert len(decisions(packet, itemKind="FACT")) == 1
