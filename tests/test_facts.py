"""assertFact's modes and outcomes, and retractFact, end to end over GraphQL (docs/design.md "The write path")."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from conftest import GraphQLClient

FACT = (
    "id subjectId predicate value confidence status volatility validFrom validTo recordedAt"
    " lastReinforcedAt sourceEventIds supersededBy { id } version"
)

ASSERT = f"""
mutation($input: FactInput!) {{
  assertFact(input: $input) {{
    outcome
    fact {{ {FACT} }}
    superseded {{ {FACT} }}
    conflict {{ id status facts {{ id }} }}
  }}
}}
"""

RETRACT = f"mutation($id: ID!, $reason: String) {{ retractFact(id: $id, reason: $reason) {{ {FACT} }} }}"
READ = f"query($id: ID!) {{ fact(id: $id) {{ {FACT} }} }}"


async def assert_fact(client: GraphQLClient, subject: str, predicate: str, value: Any, **extra: Any) -> dict[str, Any]:
    data = await client.execute(
        ASSERT, {"input": {"subjectId": subject, "predicate": predicate, "value": value, **extra}}
    )
    outcome: dict[str, Any] = data["assertFact"]
    return outcome


async def read_fact(client: GraphQLClient, fact_id: str) -> dict[str, Any]:
    fact: dict[str, Any] = (await client.execute(READ, {"id": fact_id}))["fact"]
    return fact


async def record_event(client: GraphQLClient, subject: str, text: str = "hello") -> str:
    data = await client.execute(
        'mutation($s: String!, $p: JSON!) { recordEvent(input: {subjectId: $s, kind: "note", payload: $p}) { id } }',
        {"s": subject, "p": {"text": text}},
    )
    event_id: str = data["recordEvent"]["id"]
    return event_id


def when(text: str) -> datetime:
    return datetime.fromisoformat(text)


# ---------------------------------------------------------------- CREATED


async def test_first_assertion_creates_an_active_fact(client: GraphQLClient, subject: str) -> None:
    before = datetime.now(UTC)
    result = await assert_fact(client, subject, "home_city", "Lyon", confidence=0.8, volatility="SLOW")
    fact = result["fact"]
    assert result["outcome"] == "CREATED"
    assert result["superseded"] == [] and result["conflict"] is None
    assert fact["subjectId"] == subject and fact["predicate"] == "home_city" and fact["value"] == "Lyon"
    assert fact["status"] == "ACTIVE" and fact["version"] == 1
    assert fact["confidence"] == 0.8 and fact["volatility"] == "SLOW"
    assert fact["lastReinforcedAt"] is None and fact["supersededBy"] is None
    assert when(fact["recordedAt"]) >= before
    assert when(fact["recordedAt"]).utcoffset() == timedelta(0)  # emitted in UTC with an offset
    assert await read_fact(client, fact["id"]) == fact


async def test_assertion_defaults_to_stable_volatility(client: GraphQLClient, subject: str) -> None:
    fact = (await assert_fact(client, subject, "likes", "tea"))["fact"]
    assert fact["volatility"] == "STABLE" and fact["confidence"] is None


async def test_json_values_of_any_shape_round_trip(client: GraphQLClient, subject: str) -> None:
    value = {"name": "Ada", "tags": ["a", "b"], "n": 3, "ok": True, "none": None, "nested": {"x": 1.5}}
    fact = (await assert_fact(client, subject, "profile", value))["fact"]
    assert fact["value"] == value
    assert (await read_fact(client, fact["id"]))["value"] == value


# ---------------------------------------------------------------- REINFORCED


@pytest.mark.parametrize("mode", ["SUPERSEDE", "CONTEST", "ADD"])
async def test_equal_value_only_reinforces_the_fact(client: GraphQLClient, subject: str, mode: str) -> None:
    first = (await assert_fact(client, subject, "language", "fr", confidence=0.5))["fact"]
    again = await assert_fact(client, subject, "language", "fr", mode=mode, confidence=0.9)
    assert again["outcome"] == "REINFORCED"
    assert again["superseded"] == [] and again["conflict"] is None
    fact = again["fact"]
    assert fact["id"] == first["id"]
    assert fact["version"] == first["version"] == 1
    assert fact["status"] == "ACTIVE"
    assert fact["lastReinforcedAt"] is not None
    assert when(fact["lastReinforcedAt"]) >= when(first["recordedAt"])
    # Reinforcement keeps the fact's other fields.
    assert fact["confidence"] == 0.5 and fact["recordedAt"] == first["recordedAt"]
    facts = await client.execute(
        "query($s: String!) { facts(subjectId: $s) { edges { node { id } } } }", {"s": subject}
    )
    assert [e["node"]["id"] for e in facts["facts"]["edges"]] == [first["id"]]


async def test_each_reinforcement_moves_last_reinforced_at(client: GraphQLClient, subject: str) -> None:
    fact_id = (await assert_fact(client, subject, "team", "blue"))["fact"]["id"]
    one = (await assert_fact(client, subject, "team", "blue"))["fact"]
    two = (await assert_fact(client, subject, "team", "blue"))["fact"]
    assert one["id"] == two["id"] == fact_id
    assert when(two["lastReinforcedAt"]) > when(one["lastReinforcedAt"])
    assert two["version"] == 1


async def test_reinforcement_adds_new_source_events_to_provenance(client: GraphQLClient, subject: str) -> None:
    e1, e2, e3 = [await record_event(client, subject, f"turn {i}") for i in range(3)]
    first = (await assert_fact(client, subject, "pet", "cat", sourceEventIds=[e1]))["fact"]
    assert first["sourceEventIds"] == [e1]
    again = (await assert_fact(client, subject, "pet", "cat", sourceEventIds=[e2, e1, e3]))["fact"]
    assert again["id"] == first["id"]
    assert sorted(again["sourceEventIds"]) == sorted([e1, e2, e3])  # union, no duplicates
    assert len(again["sourceEventIds"]) == 3


async def test_json_equality_ignores_key_order_at_every_depth(client: GraphQLClient, subject: str) -> None:
    first = await assert_fact(client, subject, "address", {"city": "Oslo", "geo": {"lat": 59.9, "lon": 10.7}})
    again = await assert_fact(client, subject, "address", {"geo": {"lon": 10.7, "lat": 59.9}, "city": "Oslo"})
    assert again["outcome"] == "REINFORCED"
    assert again["fact"]["id"] == first["fact"]["id"]


async def test_list_order_matters_for_equality(client: GraphQLClient, subject: str) -> None:
    await assert_fact(client, subject, "ranking", ["a", "b"])
    again = await assert_fact(client, subject, "ranking", ["b", "a"])
    assert again["outcome"] == "SUPERSEDED_PREVIOUS"


async def test_values_of_another_predicate_or_subject_are_not_compared(client: GraphQLClient, subject: str) -> None:
    a = await assert_fact(client, subject, "color", "red")
    b = await assert_fact(client, subject, "shade", "red")
    c = await assert_fact(client, subject + "-other", "color", "red")
    assert [r["outcome"] for r in (a, b, c)] == ["CREATED", "CREATED", "CREATED"]
    assert len({a["fact"]["id"], b["fact"]["id"], c["fact"]["id"]}) == 3


# ---------------------------------------------------------------- SUPERSEDE


async def test_supersede_moves_the_earlier_fact_to_superseded(client: GraphQLClient, subject: str) -> None:
    old = (await assert_fact(client, subject, "employer", "Acme"))["fact"]
    result = await assert_fact(client, subject, "employer", "Globex", mode="SUPERSEDE")
    new = result["fact"]
    assert result["outcome"] == "SUPERSEDED_PREVIOUS"
    assert new["status"] == "ACTIVE" and new["version"] == 1 and new["id"] != old["id"]
    (moved,) = result["superseded"]
    assert moved["id"] == old["id"]
    assert moved["status"] == "SUPERSEDED"
    assert moved["supersededBy"] == {"id": new["id"]}
    assert moved["version"] == old["version"] + 1
    # Without a validFrom on the new fact, validTo is the moment of the write.
    assert moved["validTo"] is not None
    assert when(old["recordedAt"]) <= when(moved["validTo"]) <= when(new["recordedAt"])
    assert await read_fact(client, old["id"]) == moved


async def test_supersede_is_the_default_mode(client: GraphQLClient, subject: str) -> None:
    await assert_fact(client, subject, "status_text", "busy")
    result = await assert_fact(client, subject, "status_text", "free")
    assert result["outcome"] == "SUPERSEDED_PREVIOUS"


async def test_supersede_sets_valid_to_to_the_new_facts_valid_from(client: GraphQLClient, subject: str) -> None:
    old = (await assert_fact(client, subject, "plan", "basic", validFrom="2025-01-01T00:00:00+00:00"))["fact"]
    result = await assert_fact(client, subject, "plan", "pro", validFrom="2026-03-01T12:00:00+02:00")
    (moved,) = result["superseded"]
    assert moved["id"] == old["id"]
    assert when(moved["validTo"]) == when("2026-03-01T10:00:00+00:00")
    assert moved["validTo"] == "2026-03-01T10:00:00+00:00"  # emitted in UTC
    assert result["fact"]["validFrom"] == "2026-03-01T10:00:00+00:00"


async def test_supersede_replaces_every_active_value_of_the_predicate(client: GraphQLClient, subject: str) -> None:
    a = (await assert_fact(client, subject, "skill", "python", mode="ADD"))["fact"]
    b = (await assert_fact(client, subject, "skill", "go", mode="ADD"))["fact"]
    result = await assert_fact(client, subject, "skill", "rust", mode="SUPERSEDE")
    assert sorted(f["id"] for f in result["superseded"]) == sorted([a["id"], b["id"]])
    assert all(f["supersededBy"] == {"id": result["fact"]["id"]} for f in result["superseded"])
    active = await client.execute(
        "query($s: String!) { facts(subjectId: $s, status: ACTIVE) { edges { node { value } } } }", {"s": subject}
    )
    assert [e["node"]["value"] for e in active["facts"]["edges"]] == ["rust"]


async def test_superseded_by_resolves_to_the_new_fact(client: GraphQLClient, subject: str) -> None:
    old = (await assert_fact(client, subject, "mood", "calm"))["fact"]
    new = (await assert_fact(client, subject, "mood", "tense"))["fact"]
    data = await client.execute(
        "query($id: ID!) { fact(id: $id) { supersededBy { id value status supersededBy { id } } } }", {"id": old["id"]}
    )
    assert data["fact"]["supersededBy"] == {"id": new["id"], "value": "tense", "status": "ACTIVE", "supersededBy": None}


async def test_a_value_equal_to_a_superseded_one_creates_a_new_fact(client: GraphQLClient, subject: str) -> None:
    first = (await assert_fact(client, subject, "city", "Rome"))["fact"]
    await assert_fact(client, subject, "city", "Milan")
    back = await assert_fact(client, subject, "city", "Rome")
    assert back["outcome"] == "SUPERSEDED_PREVIOUS"
    assert back["fact"]["id"] != first["id"]


# ---------------------------------------------------------------- ADD and CONTEST


async def test_add_leaves_both_facts_active(client: GraphQLClient, subject: str) -> None:
    a = await assert_fact(client, subject, "speaks", "en")
    b = await assert_fact(client, subject, "speaks", "de", mode="ADD")
    assert b["outcome"] == "CREATED" and b["superseded"] == [] and b["conflict"] is None
    assert (await read_fact(client, a["fact"]["id"]))["status"] == "ACTIVE"
    assert (await read_fact(client, b["fact"]["id"]))["status"] == "ACTIVE"


async def test_contest_opens_a_conflict_set_holding_both(client: GraphQLClient, subject: str) -> None:
    a = (await assert_fact(client, subject, "birthday", "05-01"))["fact"]
    result = await assert_fact(client, subject, "birthday", "06-01", mode="CONTEST")
    assert result["outcome"] == "CONFLICT_OPENED"
    assert result["superseded"] == []
    conflict = result["conflict"]
    assert conflict["status"] == "OPEN"
    assert sorted(f["id"] for f in conflict["facts"]) == sorted([a["id"], result["fact"]["id"]])
    # Members of an OPEN set stay ACTIVE.
    assert (await read_fact(client, a["id"]))["status"] == "ACTIVE"
    assert result["fact"]["status"] == "ACTIVE"


async def test_contest_without_an_earlier_fact_just_creates(client: GraphQLClient, subject: str) -> None:
    result = await assert_fact(client, subject, "nickname", "Bo", mode="CONTEST")
    assert result["outcome"] == "CREATED" and result["conflict"] is None


# ---------------------------------------------------------------- provenance


async def test_source_events_resolve_to_the_recorded_events(client: GraphQLClient, subject: str) -> None:
    e1 = await record_event(client, subject, "I moved to Paris")
    fact = (await assert_fact(client, subject, "lives_in", "Paris", sourceEventIds=[e1]))["fact"]
    data = await client.execute(
        "query($id: ID!) { fact(id: $id) { sourceEvents { id kind payload } } }", {"id": fact["id"]}
    )
    assert data["fact"]["sourceEvents"] == [{"id": e1, "kind": "note", "payload": {"text": "I moved to Paris"}}]


async def test_source_event_of_another_subject_is_invalid_input(client: GraphQLClient, subject: str) -> None:
    foreign = await record_event(client, subject + "-other")
    mine = await record_event(client, subject)
    err = await client.error(
        ASSERT, {"input": {"subjectId": subject, "predicate": "p", "value": 1, "sourceEventIds": [mine, foreign]}}
    )
    assert err["extensions"]["code"] == "INVALID_INPUT"
    assert await _fact_count(client, subject) == 0  # nothing half-written


async def test_unknown_source_event_is_invalid_input(client: GraphQLClient, subject: str) -> None:
    err = await client.error(
        ASSERT, {"input": {"subjectId": subject, "predicate": "p", "value": 1, "sourceEventIds": [str(uuid.uuid4())]}}
    )
    assert err["extensions"]["code"] == "INVALID_INPUT"
    assert await _fact_count(client, subject) == 0


async def test_malformed_source_event_id_is_invalid_input(client: GraphQLClient, subject: str) -> None:
    err = await client.error(
        ASSERT, {"input": {"subjectId": subject, "predicate": "p", "value": 1, "sourceEventIds": ["not-an-id"]}}
    )
    assert err["extensions"]["code"] == "INVALID_INPUT"


async def test_rejected_source_events_do_not_reinforce(client: GraphQLClient, subject: str) -> None:
    fact = (await assert_fact(client, subject, "diet", "vegan"))["fact"]
    await client.error(
        ASSERT,
        {"input": {"subjectId": subject, "predicate": "diet", "value": "vegan", "sourceEventIds": [str(uuid.uuid4())]}},
    )
    assert (await read_fact(client, fact["id"])) == fact


async def _fact_count(client: GraphQLClient, subject: str) -> int:
    data = await client.execute("query($s: String!) { facts(subjectId: $s) { edges { cursor } } }", {"s": subject})
    return len(data["facts"]["edges"])


# ---------------------------------------------------------------- retractFact


async def test_retract_moves_an_active_fact_to_retracted(client: GraphQLClient, subject: str) -> None:
    fact = (await assert_fact(client, subject, "allergy", "nuts"))["fact"]
    retracted = (await client.execute(RETRACT, {"id": fact["id"], "reason": "user said it was a joke"}))["retractFact"]
    assert retracted["id"] == fact["id"]
    assert retracted["status"] == "RETRACTED"
    assert retracted["version"] == fact["version"] + 1
    assert retracted["value"] == "nuts"  # still readable for audit
    assert await read_fact(client, fact["id"]) == retracted


async def test_retract_moves_a_superseded_fact_to_retracted(client: GraphQLClient, subject: str) -> None:
    old = (await assert_fact(client, subject, "car", "Fiat"))["fact"]
    await assert_fact(client, subject, "car", "Volvo")
    retracted = (await client.execute(RETRACT, {"id": old["id"]}))["retractFact"]
    assert retracted["status"] == "RETRACTED"
    assert retracted["version"] == 3  # created 1, superseded 2, retracted 3


async def test_retracting_twice_is_an_illegal_transition(client: GraphQLClient, subject: str) -> None:
    fact = (await assert_fact(client, subject, "hobby", "chess"))["fact"]
    await client.execute(RETRACT, {"id": fact["id"]})
    err = await client.error(RETRACT, {"id": fact["id"]})
    assert err["extensions"]["code"] == "ILLEGAL_TRANSITION"
    assert (await read_fact(client, fact["id"]))["version"] == 2


async def test_retracting_a_member_of_an_open_conflict_is_an_illegal_transition(
    client: GraphQLClient, subject: str
) -> None:
    a = (await assert_fact(client, subject, "age", 30))["fact"]
    await assert_fact(client, subject, "age", 31, mode="CONTEST")
    err = await client.error(RETRACT, {"id": a["id"]})
    assert err["extensions"]["code"] == "ILLEGAL_TRANSITION"
    assert (await read_fact(client, a["id"]))["status"] == "ACTIVE"


async def test_retracting_an_unknown_fact_is_not_found(client: GraphQLClient) -> None:
    err = await client.error(RETRACT, {"id": str(uuid.uuid4())})
    assert err["extensions"]["code"] == "NOT_FOUND"


async def test_retracting_a_malformed_id_is_invalid_input(client: GraphQLClient) -> None:
    err = await client.error(RETRACT, {"id": "fact-1"})
    assert err["extensions"]["code"] == "INVALID_INPUT"


async def test_a_retracted_value_asserted_again_creates_a_new_fact(client: GraphQLClient, subject: str) -> None:
    fact = (await assert_fact(client, subject, "job", "pilot"))["fact"]
    await client.execute(RETRACT, {"id": fact["id"]})
    again = await assert_fact(client, subject, "job", "pilot")
    assert again["outcome"] == "CREATED"
    assert again["fact"]["id"] != fact["id"]
    assert (await read_fact(client, fact["id"]))["status"] == "RETRACTED"


# ---------------------------------------------------------------- reads by id


@pytest.mark.parametrize("raw", [str(uuid.uuid4()), "nope", "", "x" * 500])
async def test_fact_and_event_by_unknown_or_malformed_id_are_null(client: GraphQLClient, raw: str) -> None:
    data = await client.execute("query($id: ID!) { fact(id: $id) { id } event(id: $id) { id } }", {"id": raw})
    assert data == {"fact": None, "event": None}


async def test_uuid_ids_are_accepted_in_any_case(client: GraphQLClient, subject: str) -> None:
    fact = (await assert_fact(client, subject, "tz", "UTC"))["fact"]
    assert (await read_fact(client, fact["id"].upper()))["id"] == fact["id"]
