"""Conflict sets: CONTEST, openConflict, resolveConflict, dismissConflict (docs/design.md "The write path")."""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime
from typing import Any

from conftest import GraphQLClient

FACT = "id subjectId status value version validTo supersededBy { id }"
CONFLICT = f"id subjectId status reason createdAt resolvedAt facts {{ {FACT} }} keptFact {{ id status }}"

ASSERT = f"""
mutation($input: FactInput!) {{
  assertFact(input: $input) {{ outcome fact {{ {FACT} }} superseded {{ id }} conflict {{ {CONFLICT} }} }}
}}
"""
OPEN = f"mutation($ids: [ID!]!, $reason: String) {{ openConflict(factIds: $ids, reason: $reason) {{ {CONFLICT} }} }}"
RESOLVE = f"mutation($id: ID!, $keep: ID!) {{ resolveConflict(id: $id, keepFactId: $keep) {{ {CONFLICT} }} }}"
DISMISS = f"mutation($id: ID!) {{ dismissConflict(id: $id) {{ {CONFLICT} }} }}"
RETRACT = "mutation($id: ID!) { retractFact(id: $id) { id status version } }"
READ = f"query($id: ID!) {{ fact(id: $id) {{ {FACT} }} }}"
CONFLICTS = f"""
query($s: String, $status: ConflictStatus, $first: Int, $after: String) {{
  conflicts(subjectId: $s, status: $status, first: $first, after: $after) {{
    edges {{ cursor node {{ {CONFLICT} }} }} pageInfo {{ hasNextPage endCursor }}
  }}
}}
"""


async def assert_fact(client: GraphQLClient, subject: str, predicate: str, value: Any, **extra: Any) -> dict[str, Any]:
    data = await client.execute(
        ASSERT, {"input": {"subjectId": subject, "predicate": predicate, "value": value, **extra}}
    )
    outcome: dict[str, Any] = data["assertFact"]
    return outcome


async def new_fact(client: GraphQLClient, subject: str, predicate: str, value: Any = "v") -> dict[str, Any]:
    fact: dict[str, Any] = (await assert_fact(client, subject, predicate, value, mode="ADD"))["fact"]
    return fact


async def read_fact(client: GraphQLClient, fact_id: str) -> dict[str, Any]:
    fact: dict[str, Any] = (await client.execute(READ, {"id": fact_id}))["fact"]
    return fact


async def open_set(client: GraphQLClient, ids: list[str], reason: str | None = None) -> dict[str, Any]:
    conflict: dict[str, Any] = (await client.execute(OPEN, {"ids": ids, "reason": reason}))["openConflict"]
    return conflict


def ids_of(facts: list[dict[str, Any]]) -> list[str]:
    return sorted(f["id"] for f in facts)


# ---------------------------------------------------------------- CONTEST


async def test_contest_again_joins_the_open_set(client: GraphQLClient, subject: str) -> None:
    a = (await assert_fact(client, subject, "phone", "111"))["fact"]
    first = await assert_fact(client, subject, "phone", "222", mode="CONTEST")
    second = await assert_fact(client, subject, "phone", "333", mode="CONTEST")
    assert second["outcome"] == "CONFLICT_OPENED"
    assert second["conflict"]["id"] == first["conflict"]["id"]
    assert ids_of(second["conflict"]["facts"]) == sorted([a["id"], first["fact"]["id"], second["fact"]["id"]])
    sets = (await client.execute(CONFLICTS, {"s": subject}))["conflicts"]["edges"]
    assert len(sets) == 1


async def test_supersede_against_an_open_set_supersedes_all_and_resolves_it(
    client: GraphQLClient, subject: str
) -> None:
    a = (await assert_fact(client, subject, "email", "a@x.org"))["fact"]
    contested = await assert_fact(client, subject, "email", "b@x.org", mode="CONTEST")
    b = contested["fact"]
    result = await assert_fact(client, subject, "email", "c@x.org", mode="SUPERSEDE")
    new = result["fact"]
    assert result["outcome"] == "SUPERSEDED_PREVIOUS"
    assert sorted(f["id"] for f in result["superseded"]) == sorted([a["id"], b["id"]])
    for old in (a, b):
        now = await read_fact(client, old["id"])
        assert now["status"] == "SUPERSEDED"
        assert now["supersededBy"] == {"id": new["id"]}
        assert now["version"] == 2
        assert now["validTo"] is not None
    conflict = (await client.execute(CONFLICTS, {"s": subject}))["conflicts"]["edges"][0]["node"]
    assert conflict["id"] == contested["conflict"]["id"]
    assert conflict["status"] == "RESOLVED"
    assert conflict["keptFact"] is None
    assert conflict["resolvedAt"] is not None
    assert new["status"] == "ACTIVE"


async def test_equal_value_against_an_open_set_only_reinforces(client: GraphQLClient, subject: str) -> None:
    a = (await assert_fact(client, subject, "shoe_size", 42))["fact"]
    contested = await assert_fact(client, subject, "shoe_size", 43, mode="CONTEST")
    again = await assert_fact(client, subject, "shoe_size", 42, mode="SUPERSEDE")
    assert again["outcome"] == "REINFORCED" and again["fact"]["id"] == a["id"]
    conflict = (await client.execute(CONFLICTS, {"s": subject}))["conflicts"]["edges"][0]["node"]
    assert conflict["id"] == contested["conflict"]["id"] and conflict["status"] == "OPEN"


# ---------------------------------------------------------------- openConflict


async def test_open_conflict_holds_the_facts_and_the_reason(client: GraphQLClient, subject: str) -> None:
    a = await new_fact(client, subject, "works_at", "Acme")
    b = await new_fact(client, subject, "unemployed", True)
    conflict = await open_set(client, [a["id"], b["id"]], reason="cannot both hold")
    assert conflict["status"] == "OPEN"
    assert conflict["subjectId"] == subject
    assert conflict["reason"] == "cannot both hold"
    assert [f["id"] for f in conflict["facts"]] == [a["id"], b["id"]]
    assert all(f["status"] == "ACTIVE" and f["version"] == 1 for f in conflict["facts"])
    assert conflict["resolvedAt"] is None and conflict["keptFact"] is None
    datetime.fromisoformat(conflict["createdAt"])


async def test_open_conflict_with_a_non_active_fact_is_invalid_input(client: GraphQLClient, subject: str) -> None:
    old = (await assert_fact(client, subject, "city", "Nice"))["fact"]
    new = (await assert_fact(client, subject, "city", "Pau"))["fact"]
    err = await client.error(OPEN, {"ids": [old["id"], new["id"]]})
    assert err["extensions"]["code"] == "INVALID_INPUT"
    other = await new_fact(client, subject, "town")
    await client.execute(RETRACT, {"id": other["id"]})
    err = await client.error(OPEN, {"ids": [new["id"], other["id"]]})
    assert err["extensions"]["code"] == "INVALID_INPUT"


async def test_open_conflict_across_subjects_is_invalid_input(client: GraphQLClient, subject: str) -> None:
    a = await new_fact(client, subject, "x")
    b = await new_fact(client, subject + "-other", "x")
    err = await client.error(OPEN, {"ids": [a["id"], b["id"]]})
    assert err["extensions"]["code"] == "INVALID_INPUT"


async def test_open_conflict_with_a_fact_already_in_an_open_set_is_invalid_input(
    client: GraphQLClient, subject: str
) -> None:
    a, b, c = [await new_fact(client, subject, p) for p in ("p1", "p2", "p3")]
    await open_set(client, [a["id"], b["id"]])
    err = await client.error(OPEN, {"ids": [b["id"], c["id"]]})
    assert err["extensions"]["code"] == "INVALID_INPUT"
    assert len((await client.execute(CONFLICTS, {"s": subject}))["conflicts"]["edges"]) == 1


async def test_open_conflict_with_a_repeated_id_is_invalid_input(client: GraphQLClient, subject: str) -> None:
    a = await new_fact(client, subject, "p")
    err = await client.error(OPEN, {"ids": [a["id"], a["id"]]})
    assert err["extensions"]["code"] == "INVALID_INPUT"


async def test_open_conflict_with_an_unknown_id_is_not_found(client: GraphQLClient, subject: str) -> None:
    a = await new_fact(client, subject, "p")
    err = await client.error(OPEN, {"ids": [a["id"], str(uuid.uuid4())]})
    assert err["extensions"]["code"] == "NOT_FOUND"
    assert (await read_fact(client, a["id"]))["status"] == "ACTIVE"
    assert (await client.execute(CONFLICTS, {"s": subject}))["conflicts"]["edges"] == []


async def test_open_conflict_with_a_malformed_id_is_invalid_input(client: GraphQLClient, subject: str) -> None:
    a = await new_fact(client, subject, "p")
    err = await client.error(OPEN, {"ids": [a["id"], "fact-2"]})
    assert err["extensions"]["code"] == "INVALID_INPUT"


async def test_open_conflict_accepts_250_facts(client: GraphQLClient, subject: str) -> None:
    # Ten aliased writes per request stay under the alias limit (15).
    requests = []
    for start in range(0, 250, 10):
        fields = " ".join(
            f'f{i}: assertFact(input: {{subjectId: $s, predicate: "many_{i}", value: {i}}}) {{ fact {{ id }} }}'
            for i in range(start, start + 10)
        )
        requests.append(client.execute(f"mutation($s: String!) {{ {fields} }}", {"s": subject}))
    ids = [r["fact"]["id"] for data in await asyncio.gather(*requests) for r in data.values()]
    assert len(set(ids)) == 250
    conflict = await open_set(client, ids)
    assert len(conflict["facts"]) == 250


# ---------------------------------------------------------------- resolveConflict


async def test_resolve_keeps_one_fact_and_supersedes_the_others(client: GraphQLClient, subject: str) -> None:
    a, b, c = [await new_fact(client, subject, "eye_color", v) for v in ("blue", "green", "grey")]
    conflict = await open_set(client, [a["id"], b["id"], c["id"]])
    resolved = (await client.execute(RESOLVE, {"id": conflict["id"], "keep": b["id"]}))["resolveConflict"]
    assert resolved["status"] == "RESOLVED"
    assert resolved["keptFact"] == {"id": b["id"], "status": "ACTIVE"}
    assert resolved["resolvedAt"] is not None
    assert datetime.fromisoformat(resolved["resolvedAt"]) >= datetime.fromisoformat(resolved["createdAt"])
    kept = await read_fact(client, b["id"])
    assert kept["status"] == "ACTIVE" and kept["version"] == 1 and kept["supersededBy"] is None
    for loser in (a, c):
        now = await read_fact(client, loser["id"])
        assert now["status"] == "SUPERSEDED"
        assert now["supersededBy"] == {"id": b["id"]}
        assert now["version"] == 2
        assert now["validTo"] is not None
    # The kept fact is no longer in an open set: it can be retracted.
    assert (await client.execute(RETRACT, {"id": b["id"]}))["retractFact"]["status"] == "RETRACTED"


async def test_resolving_a_closed_set_is_an_illegal_transition(client: GraphQLClient, subject: str) -> None:
    a, b = [await new_fact(client, subject, p) for p in ("p1", "p2")]
    conflict = await open_set(client, [a["id"], b["id"]])
    await client.execute(RESOLVE, {"id": conflict["id"], "keep": a["id"]})
    err = await client.error(RESOLVE, {"id": conflict["id"], "keep": a["id"]})
    assert err["extensions"]["code"] == "ILLEGAL_TRANSITION"
    err = await client.error(DISMISS, {"id": conflict["id"]})
    assert err["extensions"]["code"] == "ILLEGAL_TRANSITION"


async def test_keeping_a_fact_outside_the_set_is_an_illegal_transition(client: GraphQLClient, subject: str) -> None:
    a, b, outsider = [await new_fact(client, subject, p) for p in ("p1", "p2", "p3")]
    conflict = await open_set(client, [a["id"], b["id"]])
    for keep in (outsider["id"], str(uuid.uuid4())):
        err = await client.error(RESOLVE, {"id": conflict["id"], "keep": keep})
        assert err["extensions"]["code"] == "ILLEGAL_TRANSITION"
    still = (await client.execute(CONFLICTS, {"s": subject}))["conflicts"]["edges"][0]["node"]
    assert still["status"] == "OPEN"
    assert all(f["status"] == "ACTIVE" for f in still["facts"])


async def test_resolving_an_unknown_set_is_not_found(client: GraphQLClient, subject: str) -> None:
    a = await new_fact(client, subject, "p")
    err = await client.error(RESOLVE, {"id": str(uuid.uuid4()), "keep": a["id"]})
    assert err["extensions"]["code"] == "NOT_FOUND"


async def test_resolving_with_malformed_ids_is_invalid_input(client: GraphQLClient, subject: str) -> None:
    a, b = [await new_fact(client, subject, p) for p in ("p1", "p2")]
    conflict = await open_set(client, [a["id"], b["id"]])
    assert (await client.error(RESOLVE, {"id": "c-1", "keep": a["id"]}))["extensions"]["code"] == "INVALID_INPUT"
    assert (await client.error(RESOLVE, {"id": conflict["id"], "keep": "f-1"}))["extensions"]["code"] == "INVALID_INPUT"


# ---------------------------------------------------------------- dismissConflict


async def test_dismiss_closes_the_set_and_leaves_the_facts_active(client: GraphQLClient, subject: str) -> None:
    a, b = [await new_fact(client, subject, "nationality", v) for v in ("FR", "IT")]
    conflict = await open_set(client, [a["id"], b["id"]])
    dismissed = (await client.execute(DISMISS, {"id": conflict["id"]}))["dismissConflict"]
    assert dismissed["status"] == "DISMISSED"
    assert dismissed["keptFact"] is None and dismissed["resolvedAt"] is not None
    for fact in (a, b):
        now = await read_fact(client, fact["id"])
        assert now["status"] == "ACTIVE" and now["version"] == 1 and now["supersededBy"] is None
    # Out of the open set, the facts can join a new set and be retracted again.
    again = await open_set(client, [a["id"], b["id"]])
    assert again["id"] != conflict["id"] and again["status"] == "OPEN"
    await client.execute(DISMISS, {"id": again["id"]})
    assert (await client.execute(RETRACT, {"id": a["id"]}))["retractFact"]["version"] == 2


async def test_dismissing_an_unknown_or_malformed_set_fails_with_its_code(client: GraphQLClient) -> None:
    assert (await client.error(DISMISS, {"id": str(uuid.uuid4())}))["extensions"]["code"] == "NOT_FOUND"
    assert (await client.error(DISMISS, {"id": "nope"}))["extensions"]["code"] == "INVALID_INPUT"


# ---------------------------------------------------------------- conflicts(...)


async def test_conflicts_filter_by_subject_and_status(client: GraphQLClient, subject: str) -> None:
    other = subject + "-other"
    sets: dict[str, str] = {}
    for name in ("open", "resolved", "dismissed"):
        a, b = [await new_fact(client, subject, f"{name}-{i}") for i in range(2)]
        sets[name] = (await open_set(client, [a["id"], b["id"]]))["id"]
        if name == "resolved":
            await client.execute(RESOLVE, {"id": sets[name], "keep": a["id"]})
        if name == "dismissed":
            await client.execute(DISMISS, {"id": sets[name]})
    x, y = [await new_fact(client, other, f"q{i}") for i in range(2)]
    foreign = (await open_set(client, [x["id"], y["id"]]))["id"]

    everything = (await client.execute(CONFLICTS, {"s": subject}))["conflicts"]
    assert [e["node"]["id"] for e in everything["edges"]] == [sets["dismissed"], sets["resolved"], sets["open"]]
    assert everything["pageInfo"]["hasNextPage"] is False
    for status in ("OPEN", "RESOLVED", "DISMISSED"):
        page = (await client.execute(CONFLICTS, {"s": subject, "status": status}))["conflicts"]
        assert [e["node"]["id"] for e in page["edges"]] == [sets[status.lower()]]
        assert page["edges"][0]["node"]["status"] == status
    # Without a subject: every set of the project, newest first (other tests' sets included).
    ids = []
    after = None
    while True:
        page = (await client.execute(CONFLICTS, {"status": "OPEN", "first": 100, "after": after}))["conflicts"]
        ids += [e["node"]["id"] for e in page["edges"]]
        if not page["pageInfo"]["hasNextPage"]:
            break
        after = page["pageInfo"]["endCursor"]
    assert foreign in ids and sets["open"] in ids
    assert sets["resolved"] not in ids and len(ids) == len(set(ids))
