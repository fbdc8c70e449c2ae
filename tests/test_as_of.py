"""`context(..., asOf:)`: the packet as the memory stood at a past instant, scenario by scenario."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from conftest import GraphQLClient, client_for
from contextlib_helpers import assert_fact, record, with_settings

from haki_context.core.serving.runtime import Runtime

AS_OF = """
query($s: String!, $q: String!, $at: DateTime) {
  context(subjectId: $s, query: $q, asOf: $at) {
    traceId
    facts { id predicate value }
    episodes { eventId excerpt }
    trace {
      createdAt asOf
      decisions { itemKind itemId decision reasonCode }
    }
  }
}
"""


async def at(client: GraphQLClient, subject: str, query: str, instant: datetime | str | None) -> dict[str, Any]:
    when = instant.isoformat() if isinstance(instant, datetime) else instant
    data = await client.execute(AS_OF, {"s": subject, "q": query, "at": when})
    packet: dict[str, Any] = data["context"]
    return packet


def values(packet: dict[str, Any]) -> list[Any]:
    return [f["value"] for f in packet["facts"]]


def reasons(packet: dict[str, Any], item_id: str) -> list[str]:
    return [d["reasonCode"] for d in packet["trace"]["decisions"] if d["itemId"] == item_id]


async def fact_dates(client: GraphQLClient, fact_id: str) -> dict[str, Any]:
    data = await client.execute(
        "query($id: ID!) { fact(id: $id) { recordedAt endedAt lastReinforcedAt } }", {"id": fact_id}
    )
    return {k: v and datetime.fromisoformat(v) for k, v in data["fact"].items()}


def between(a: datetime, b: datetime) -> datetime:
    return a + (b - a) / 2


async def test_a_superseded_fact_is_served_with_its_old_value_before_and_its_new_value_after(
    client: GraphQLClient, subject: str
) -> None:
    old = await assert_fact(client, subject, "home_city", "Lisbon")
    new = await assert_fact(client, subject, "home_city", "Porto")
    t1 = (await fact_dates(client, old["fact"]["id"]))["recordedAt"]
    t2 = (await fact_dates(client, new["fact"]["id"]))["recordedAt"]
    assert (await fact_dates(client, old["fact"]["id"]))["endedAt"] == t2
    assert values(await at(client, subject, "home city", t1)) == ["Lisbon"]
    assert values(await at(client, subject, "home city", between(t1, t2))) == ["Lisbon"]
    assert values(await at(client, subject, "home city", t2)) == ["Porto"]
    assert values(await at(client, subject, "home city", datetime.now(UTC))) == ["Porto"]


async def test_a_superseding_value_valid_from_the_past_does_not_rewrite_what_was_served_before(
    client: GraphQLClient, subject: str
) -> None:
    # The successor is valid from 2020: the old fact's validTo is cut to 2020, yet until the
    # successor was recorded the server served the old value, and asOf says so.
    old = await assert_fact(client, subject, "employer", "Acme")
    await assert_fact(client, subject, "employer", "Globex", validFrom="2020-01-01T00:00:00+00:00")
    t1 = (await fact_dates(client, old["fact"]["id"]))["recordedAt"]
    assert values(await at(client, subject, "employer", t1)) == ["Acme"]
    assert values(await at(client, subject, "employer", None)) == ["Globex"]


async def test_a_retracted_fact_disappears_from_its_retraction_on(client: GraphQLClient, subject: str) -> None:
    fact = await assert_fact(client, subject, "pet", "a cat named Tom")
    await client.execute(
        'mutation($id: ID!) { retractFact(id: $id, reason: "wrong") { id } }', {"id": fact["fact"]["id"]}
    )
    dates = await fact_dates(client, fact["fact"]["id"])
    before = await at(client, subject, "pet cat", between(dates["recordedAt"], dates["endedAt"]))
    assert values(before) == ["a cat named Tom"]
    for instant in (dates["endedAt"], datetime.now(UTC)):
        packet = await at(client, subject, "pet cat", instant)
        assert values(packet) == [] and reasons(packet, fact["fact"]["id"]) == []


async def test_a_conflict_blocks_its_members_while_it_was_open_and_not_after(
    client: GraphQLClient, subject: str
) -> None:
    a = await assert_fact(client, subject, "employer", "Acme")
    b = await assert_fact(client, subject, "employer", "Globex", mode="ADD")
    opened = await client.execute(
        "mutation($ids: [ID!]!) { openConflict(factIds: $ids) { id createdAt } }",
        {"ids": [a["fact"]["id"], b["fact"]["id"]]},
    )
    closed = await client.execute(
        "mutation($id: ID!) { dismissConflict(id: $id) { resolvedAt } }", {"id": opened["openConflict"]["id"]}
    )
    t4 = datetime.fromisoformat(opened["openConflict"]["createdAt"])
    t5 = datetime.fromisoformat(closed["dismissConflict"]["resolvedAt"])
    before = (await fact_dates(client, b["fact"]["id"]))["recordedAt"]
    during = await at(client, subject, "employer", between(t4, t5))
    assert values(during) == []
    assert reasons(during, a["fact"]["id"]) == reasons(during, b["fact"]["id"]) == ["CONFLICT_OPEN"]
    for instant in (before, t5, datetime.now(UTC)):
        packet = await at(client, subject, "employer", instant)
        assert sorted(values(packet)) == ["Acme", "Globex"], instant
        assert "CONFLICT_OPEN" not in reasons(packet, a["fact"]["id"])


async def test_a_fact_that_joined_an_open_conflict_later_was_served_until_it_joined(
    client: GraphQLClient, subject: str
) -> None:
    a = await assert_fact(client, subject, "employer", "Acme")
    b = await assert_fact(client, subject, "employer", "Globex", mode="CONTEST")  # opens the set with a
    other = await assert_fact(client, subject, "employer", "Initech", mode="ADD")  # outside the set
    c = await assert_fact(client, subject, "employer", "Umbrella", mode="CONTEST")  # other joins with c
    assert c["conflict"]["id"] == b["conflict"]["id"]
    joined = (await fact_dates(client, c["fact"]["id"]))["recordedAt"]
    before = await at(client, subject, "employer", joined - timedelta(microseconds=1))
    assert values(before) == ["Initech"] and reasons(before, a["fact"]["id"]) == ["CONFLICT_OPEN"]
    after = await at(client, subject, "employer", joined)
    assert values(after) == [] and reasons(after, other["fact"]["id"]) == ["CONFLICT_OPEN"]


async def test_a_volatile_fact_past_its_horizon_is_blocked_then_and_served_again_once_reinforced(
    runtime: Runtime, subject: str
) -> None:
    client = client_for(with_settings(runtime, horizon_volatile_days=1 / 86400))  # a one-second horizon
    try:
        fact = await assert_fact(client, subject, "mood", "cheerful", volatility="VOLATILE")
        recorded = (await fact_dates(client, fact["fact"]["id"]))["recordedAt"]
        await asyncio.sleep(1.2)  # past the horizon
        await assert_fact(client, subject, "mood", "cheerful", volatility="VOLATILE")  # reinforced
        reinforced = (await fact_dates(client, fact["fact"]["id"]))["lastReinforcedAt"]
        assert values(await at(client, subject, "mood", recorded)) == ["cheerful"]
        expired = await at(client, subject, "mood", reinforced - timedelta(milliseconds=100))
        assert values(expired) == [] and reasons(expired, fact["fact"]["id"]) == ["VOLATILITY_EXPIRED"]
        assert values(await at(client, subject, "mood", reinforced)) == ["cheerful"]
    finally:
        await client.http.aclose()


async def test_an_event_recorded_after_the_instant_is_absent(client: GraphQLClient, subject: str) -> None:
    (first,) = await record(client, subject, ["We planned the trip to Lisbon in May."])
    data = await client.execute("query($id: ID!) { event(id: $id) { recordedAt } }", {"id": first})
    t = datetime.fromisoformat(data["event"]["recordedAt"])
    (second,) = await record(client, subject, ["The trip to Lisbon moved to June."])
    then = await at(client, subject, "trip to Lisbon", t)
    assert [e["eventId"] for e in then["episodes"]] == [first]
    assert second not in {d["itemId"] for d in then["trace"]["decisions"]}
    now = await at(client, subject, "trip to Lisbon", None)
    assert {e["eventId"] for e in now["episodes"]} == {first, second}


async def test_the_trace_says_the_instant_it_answered_for(client: GraphQLClient, subject: str) -> None:
    fact = await assert_fact(client, subject, "home_city", "Lisbon")
    t = (await fact_dates(client, fact["fact"]["id"]))["recordedAt"]
    packet = await at(client, subject, "home city", t)
    assert datetime.fromisoformat(packet["trace"]["asOf"]) == t
    assert datetime.fromisoformat(packet["trace"]["createdAt"]) > t  # the call's own instant
    assert (await at(client, subject, "home city", None))["trace"]["asOf"] is None


async def test_an_instant_in_the_future_or_before_the_project_existed_is_invalid(
    client: GraphQLClient, subject: str
) -> None:
    await assert_fact(client, subject, "home_city", "Lisbon")
    for instant, words in (
        (datetime.now(UTC) + timedelta(minutes=5), "in the future"),
        (datetime(2000, 1, 1, tzinfo=UTC), "before the project existed"),
    ):
        error = await client.error(AS_OF, {"s": subject, "q": "home", "at": instant.isoformat()})
        assert error["extensions"]["code"] == "INVALID_INPUT" and words in error["message"]
    error = await client.error(AS_OF, {"s": subject, "q": "home", "at": "2026-01-01T00:00:00"})
    assert error["extensions"]["code"] == "INVALID_INPUT"


async def test_the_cover_density_rank_reads_the_past_too(runtime: Runtime, subject: str) -> None:
    client = client_for(with_settings(runtime, full_text_rank="cover_density"))
    try:
        old = await assert_fact(client, subject, "home_city", "Lisbon")
        await assert_fact(client, subject, "home_city", "Porto")
        t1 = (await fact_dates(client, old["fact"]["id"]))["recordedAt"]
        assert values(await at(client, subject, "Lisbon", t1)) == ["Lisbon"]
        assert values(await at(client, subject, "Lisbon", None)) == ["Porto"]
    finally:
        await client.http.aclose()


async def test_the_stored_trace_records_the_instant_and_the_settings(client: GraphQLClient, subject: str) -> None:
    fact = await assert_fact(client, subject, "home_city", "Lisbon")
    t = (await fact_dates(client, fact["fact"]["id"]))["recordedAt"]
    past, now = await at(client, subject, "home city", t), await at(client, subject, "home city", None)
    lookup = "query($id: ID!) { trace(id: $id) { createdAt asOf settings { id } } }"
    stored = (await client.execute(lookup, {"id": past["traceId"]}))["trace"]
    assert datetime.fromisoformat(stored["asOf"]) == t and stored["createdAt"] == past["trace"]["createdAt"]
    plain = (await client.execute(lookup, {"id": now["traceId"]}))["trace"]
    assert plain["asOf"] is None and plain["settings"]["id"] == stored["settings"]["id"]
