"""No lost or doubled writes: concurrent assertFact calls on one (subject, predicate) are serialised."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from conftest import GraphQLClient

N = 20

ASSERT = """
mutation($input: FactInput!) {
  assertFact(input: $input) { outcome fact { id } superseded { id } conflict { id } }
}
"""
FACTS = """
query($s: String!) {
  facts(subjectId: $s, first: 100) {
    edges { node { id value status version validTo recordedAt supersededBy { id } } }
    pageInfo { hasNextPage }
  }
}
"""


async def assert_all(client: GraphQLClient, subject: str, values: list[Any], mode: str) -> list[dict[str, Any]]:
    calls = [
        client.post(ASSERT, {"input": {"subjectId": subject, "predicate": "status", "value": v, "mode": mode}})
        for v in values
    ]
    bodies = [r.json() for r in await asyncio.gather(*calls)]
    for body in bodies:
        assert not body.get("errors"), body["errors"]  # no call lost to a deadlock or a unique violation
    return [b["data"]["assertFact"] for b in bodies]


async def all_facts(client: GraphQLClient, subject: str) -> list[dict[str, Any]]:
    conn = (await client.execute(FACTS, {"s": subject}))["facts"]
    assert conn["pageInfo"]["hasNextPage"] is False
    return [e["node"] for e in conn["edges"]]


async def test_concurrent_supersede_leaves_one_active_fact_and_one_chain(client: GraphQLClient, subject: str) -> None:
    results = await assert_all(client, subject, [f"value-{i}" for i in range(N)], "SUPERSEDE")
    assert Counter(r["outcome"] for r in results) == {"CREATED": 1, "SUPERSEDED_PREVIOUS": N - 1}
    # Every call superseded exactly the fact active before it: N - 1 distinct facts in all.
    superseded = [f["id"] for r in results for f in r["superseded"]]
    assert len(superseded) == len(set(superseded)) == N - 1

    facts = {f["id"]: f for f in await all_facts(client, subject)}
    assert len(facts) == N
    assert sorted(f["value"] for f in facts.values()) == sorted(f"value-{i}" for i in range(N))
    active = [f for f in facts.values() if f["status"] == "ACTIVE"]
    assert len(active) == 1
    (head,) = active
    assert head["supersededBy"] is None and head["version"] == 1 and head["validTo"] is None

    successors: Counter[str] = Counter()

    for fact in facts.values():
        if fact["status"] == "SUPERSEDED":
            assert fact["version"] == 2
            nxt = fact["supersededBy"]["id"]
            assert nxt in facts  # points to a real fact
            successors[nxt] += 1
            # Superseded at the moment its successor was written.
            assert fact["validTo"] == facts[nxt]["recordedAt"]
            assert fact["recordedAt"] < facts[nxt]["recordedAt"]
    assert max(successors.values()) == 1  # a chain, not a tree
    # From every fact, following supersededBy ends at the ACTIVE one.
    for start in facts:
        seen, current = set(), start
        while facts[current]["supersededBy"] is not None:
            assert current not in seen, "supersededBy loops"
            seen.add(current)
            current = facts[current]["supersededBy"]["id"]
        assert current == head["id"]


async def test_concurrent_equal_values_create_one_fact_and_reinforce_it(client: GraphQLClient, subject: str) -> None:
    results = await assert_all(client, subject, [{"same": True, "n": 1}] * N, "ADD")
    assert Counter(r["outcome"] for r in results) == {"CREATED": 1, "REINFORCED": N - 1}
    assert len({r["fact"]["id"] for r in results}) == 1
    (fact,) = await all_facts(client, subject)
    assert fact["status"] == "ACTIVE" and fact["version"] == 1


async def test_concurrent_contests_gather_in_one_open_set(client: GraphQLClient, subject: str) -> None:
    results = await assert_all(client, subject, list(range(N)), "CONTEST")
    assert Counter(r["outcome"] for r in results) == {"CREATED": 1, "CONFLICT_OPENED": N - 1}
    assert len({r["conflict"]["id"] for r in results if r["conflict"]}) == 1
    sets = await client.execute(
        "query($s: String!) { conflicts(subjectId: $s) { edges { node { status facts { id status } } } } }",
        {"s": subject},
    )
    (edge,) = sets["conflicts"]["edges"]
    assert edge["node"]["status"] == "OPEN"
    assert len(edge["node"]["facts"]) == N
    assert all(f["status"] == "ACTIVE" for f in edge["node"]["facts"])


async def test_concurrent_writes_to_different_predicates_do_not_block_each_other(
    client: GraphQLClient, subject: str
) -> None:
    calls = [
        client.execute(ASSERT, {"input": {"subjectId": subject, "predicate": f"p{i % 4}", "value": i}})
        for i in range(N)
    ]
    results = [d["assertFact"] for d in await asyncio.gather(*calls)]
    assert Counter(r["outcome"] for r in results)["CREATED"] == 4
    active = [f for f in await all_facts(client, subject) if f["status"] == "ACTIVE"]
    assert len(active) == 4


async def test_resolving_a_set_while_a_supersede_settles_it_ends_consistently(
    client: GraphQLClient, subject: str
) -> None:
    for round_ in range(8):
        predicate = f"race{round_}"
        a = await client.execute(ASSERT, {"input": {"subjectId": subject, "predicate": predicate, "value": "a"}})
        b = await client.execute(
            ASSERT, {"input": {"subjectId": subject, "predicate": predicate, "value": "b", "mode": "CONTEST"}}
        )
        conflict_id = b["assertFact"]["conflict"]["id"]
        resolve, supersede = await asyncio.gather(
            client.post(
                "mutation($id: ID!, $keep: ID!) { resolveConflict(id: $id, keepFactId: $keep) { status } }",
                {"id": conflict_id, "keep": a["assertFact"]["fact"]["id"]},
            ),
            client.post(ASSERT, {"input": {"subjectId": subject, "predicate": predicate, "value": "n"}}),
        )
        assert not supersede.json().get("errors"), supersede.json()
        errors = resolve.json().get("errors")
        assert not errors or errors[0]["extensions"]["code"] == "ILLEGAL_TRANSITION", errors
        facts = await client.execute(
            "query($s: String!) { facts(subjectId: $s, status: ACTIVE, first: 100) { edges { node { predicate value } } } }",
            {"s": subject},
        )
        active = [e["node"]["value"] for e in facts["facts"]["edges"] if e["node"]["predicate"] == predicate]
        assert active == ["n"]


async def test_superseding_two_predicates_of_one_open_set_at_once_ends_consistently(
    client: GraphQLClient, subject: str
) -> None:
    # One set holding facts of two predicates: superseding both at once touches the same rows.
    for round_ in range(6):
        p, q = f"left{round_}", f"right{round_}"
        ids = [
            (await client.execute(ASSERT, {"input": {"subjectId": subject, "predicate": pred, "value": 1}}))[
                "assertFact"
            ]["fact"]["id"]
            for pred in (p, q)
        ]
        await client.execute("mutation($ids: [ID!]!) { openConflict(factIds: $ids) { id } }", {"ids": ids})
        bodies = [
            r.json()
            for r in await asyncio.gather(
                *(
                    client.post(ASSERT, {"input": {"subjectId": subject, "predicate": pred, "value": 2}})
                    for pred in (p, q)
                )
            )
        ]
        assert all(not b.get("errors") for b in bodies), bodies
        assert [b["data"]["assertFact"]["outcome"] for b in bodies] == ["SUPERSEDED_PREVIOUS"] * 2
    sets = await client.execute(
        "query($s: String!) { conflicts(subjectId: $s, status: OPEN) { edges { cursor } } }", {"s": subject}
    )
    assert sets["conflicts"]["edges"] == []


async def test_concurrent_batches_naming_the_same_subjects_all_land(client: GraphQLClient, subject: str) -> None:
    subjects = [f"{subject}-{i}" for i in range(4)]
    batches = [
        [{"subjectId": s, "kind": "note", "payload": {"b": b}} for s in (subjects if b % 2 else subjects[::-1])]
        for b in range(10)
    ]
    bodies = [
        r.json()
        for r in await asyncio.gather(
            *(
                client.post("mutation($in: [EventInput!]!) { recordEvents(inputs: $in) { id } }", {"in": batch})
                for batch in batches
            )
        )
    ]
    assert all(not b.get("errors") for b in bodies), [b["errors"] for b in bodies if b.get("errors")]
    for s in subjects:
        page = await client.execute("query($s: String!) { events(subjectId: $s) { edges { cursor } } }", {"s": s})
        assert len(page["events"]["edges"]) == 10
