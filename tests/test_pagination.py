"""Keyset pagination of facts, events and conflicts: every item once, in order, with opaque cursors."""

from __future__ import annotations

import asyncio
import base64
import uuid
from typing import Any

import pytest
from conftest import GraphQLClient

FACTS = """
query($s: String!, $status: FactStatus, $first: Int, $after: String) {
  facts(subjectId: $s, status: $status, first: $first, after: $after) {
    edges { cursor node { id status recordedAt } } pageInfo { hasNextPage endCursor }
  }
}
"""
EVENTS = """
query($s: String!, $first: Int, $after: String) {
  events(subjectId: $s, first: $first, after: $after) {
    edges { cursor node { id occurredAt } } pageInfo { hasNextPage endCursor }
  }
}
"""
CONFLICTS = """
query($s: String, $first: Int, $after: String) {
  conflicts(subjectId: $s, first: $first, after: $after) {
    edges { cursor node { id createdAt } } pageInfo { hasNextPage endCursor }
  }
}
"""
ASSERT = "mutation($input: FactInput!) { assertFact(input: $input) { fact { id } } }"


async def walk(client: GraphQLClient, query: str, field: str, first: int, **variables: Any) -> list[list[str]]:
    """Every page of a connection, following endCursor until hasNextPage is false."""
    pages: list[list[str]] = []
    after = None
    while True:
        conn = (await client.execute(query, {**variables, "first": first, "after": after}))[field]
        ids = [e["node"]["id"] for e in conn["edges"]]
        pages.append(ids)
        if conn["edges"]:
            assert conn["pageInfo"]["endCursor"] == conn["edges"][-1]["cursor"]
        else:
            assert conn["pageInfo"]["endCursor"] is None
        if not conn["pageInfo"]["hasNextPage"]:
            return pages
        assert len(pages) < 100, "pagination does not end"
        after = conn["pageInfo"]["endCursor"]


async def add_facts(client: GraphQLClient, subject: str, n: int, predicate: str = "item") -> list[str]:
    ids = []
    for i in range(n):  # one by one: recordedAt increases with the order of writes
        data = await client.execute(
            ASSERT, {"input": {"subjectId": subject, "predicate": predicate, "value": i, "mode": "ADD"}}
        )
        ids.append(data["assertFact"]["fact"]["id"])
    return ids


async def test_facts_pages_cover_every_fact_once_newest_first(client: GraphQLClient, subject: str) -> None:
    ids = await add_facts(client, subject, 7)
    pages = await walk(client, FACTS, "facts", 3, s=subject)
    assert [len(p) for p in pages] == [3, 3, 1]
    assert [i for p in pages for i in p] == list(reversed(ids))


async def test_a_page_that_ends_exactly_at_the_last_item_has_no_next_page(client: GraphQLClient, subject: str) -> None:
    await add_facts(client, subject, 4)
    pages = await walk(client, FACTS, "facts", 2, s=subject)
    assert [len(p) for p in pages] == [2, 2]


async def test_an_empty_list_has_no_cursor(client: GraphQLClient, subject: str) -> None:
    for query, field in ((FACTS, "facts"), (EVENTS, "events"), (CONFLICTS, "conflicts")):
        conn = (await client.execute(query, {"s": subject}))[field]
        assert conn == {"edges": [], "pageInfo": {"hasNextPage": False, "endCursor": None}}


async def test_facts_filter_by_status(client: GraphQLClient, subject: str) -> None:
    old = await client.execute(ASSERT, {"input": {"subjectId": subject, "predicate": "a", "value": 1}})
    new = await client.execute(ASSERT, {"input": {"subjectId": subject, "predicate": "a", "value": 2}})
    gone = await client.execute(ASSERT, {"input": {"subjectId": subject, "predicate": "b", "value": 3}})
    await client.execute("mutation($id: ID!) { retractFact(id: $id) { id } }", {"id": gone["assertFact"]["fact"]["id"]})
    expected = {
        "ACTIVE": [new["assertFact"]["fact"]["id"]],
        "SUPERSEDED": [old["assertFact"]["fact"]["id"]],
        "RETRACTED": [gone["assertFact"]["fact"]["id"]],
    }
    for status, ids in expected.items():
        conn = (await client.execute(FACTS, {"s": subject, "status": status}))["facts"]
        assert [e["node"]["id"] for e in conn["edges"]] == ids
        assert all(e["node"]["status"] == status for e in conn["edges"])
    everything = (await client.execute(FACTS, {"s": subject, "status": None}))["facts"]["edges"]
    assert len(everything) == 3


async def test_status_filter_pages_without_skipping(client: GraphQLClient, subject: str) -> None:
    ids = await add_facts(client, subject, 5)
    for fact_id in ids[1::2]:
        await client.execute("mutation($id: ID!) { retractFact(id: $id) { id } }", {"id": fact_id})
    pages = await walk(client, FACTS, "facts", 1, s=subject, status="ACTIVE")
    assert [i for p in pages for i in p] == [ids[4], ids[2], ids[0]]


async def test_events_pages_cover_every_event_once_latest_first(client: GraphQLClient, subject: str) -> None:
    inputs = [
        {"subjectId": subject, "kind": "note", "payload": {"i": i}, "occurredAt": f"2026-01-0{i + 1}T00:00:00+00:00"}
        for i in range(5)
    ]
    events = (
        await client.execute(
            "mutation($inputs: [EventInput!]!) { recordEvents(inputs: $inputs) { id } }", {"inputs": inputs}
        )
    )["recordEvents"]
    pages = await walk(client, EVENTS, "events", 2, s=subject)
    assert [len(p) for p in pages] == [2, 2, 1]
    assert [i for p in pages for i in p] == [e["id"] for e in reversed(events)]


async def test_events_with_the_same_time_page_without_repeats_or_skips(client: GraphQLClient, subject: str) -> None:
    # Events given the same occurredAt: the id breaks the tie.
    same = "2026-05-01T10:30:00+00:00"
    inputs = [{"subjectId": subject, "kind": "note", "payload": {"i": i}, "occurredAt": same} for i in range(9)]
    events = (
        await client.execute(
            "mutation($inputs: [EventInput!]!) { recordEvents(inputs: $inputs) { id } }", {"inputs": inputs}
        )
    )["recordEvents"]
    pages = await walk(client, EVENTS, "events", 2, s=subject)
    flat = [i for p in pages for i in p]
    assert len(flat) == len(set(flat)) == 9
    assert sorted(flat) == sorted(e["id"] for e in events)
    assert flat == sorted(flat, key=uuid.UUID, reverse=True)


async def test_facts_written_concurrently_page_without_repeats_or_skips(client: GraphQLClient, subject: str) -> None:
    writes = [
        client.execute(ASSERT, {"input": {"subjectId": subject, "predicate": f"p{i}", "value": i}}) for i in range(12)
    ]
    ids = {d["assertFact"]["fact"]["id"] for d in await asyncio.gather(*writes)}
    pages = await walk(client, FACTS, "facts", 5, s=subject)
    flat = [i for p in pages for i in p]
    assert len(flat) == 12 and set(flat) == ids


async def test_conflicts_page_newest_first(client: GraphQLClient, subject: str) -> None:
    opened = []
    for n in range(3):
        ids = await add_facts(client, subject, 2, predicate=f"c{n}")
        data = await client.execute("mutation($ids: [ID!]!) { openConflict(factIds: $ids) { id } }", {"ids": ids})
        opened.append(data["openConflict"]["id"])
    pages = await walk(client, CONFLICTS, "conflicts", 2, s=subject)
    assert [len(p) for p in pages] == [2, 1]
    assert [i for p in pages for i in p] == list(reversed(opened))


async def test_first_defaults_to_50_and_null_means_the_default(client: GraphQLClient, subject: str) -> None:
    inputs = [{"subjectId": subject, "kind": "note", "payload": {"i": i}} for i in range(51)]
    await client.execute(
        "mutation($inputs: [EventInput!]!) { recordEvents(inputs: $inputs) { id } }", {"inputs": inputs}
    )
    for first in (None, 50):
        conn = (await client.execute(EVENTS, {"s": subject, "first": first}))["events"]
        assert len(conn["edges"]) == 50 and conn["pageInfo"]["hasNextPage"] is True
    omitted = await client.execute("query($s: String!) { events(subjectId: $s) { edges { cursor } } }", {"s": subject})
    assert len(omitted["events"]["edges"]) == 50


async def test_first_100_is_allowed(client: GraphQLClient, subject: str) -> None:
    conn = (await client.execute(FACTS, {"s": subject, "first": 100}))["facts"]
    assert conn["edges"] == []


def _b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "cursor",
    [
        "not a cursor",
        "%%%",
        _b64("hello"),
        _b64("2026-01-01T00:00:00+00:00|not-a-uuid"),
        _b64(f"yesterday|{uuid.uuid4()}"),
        _b64(f"2026-01-01T00:00:00|{uuid.uuid4()}"),  # no offset
        "",
    ],
)
@pytest.mark.parametrize("query,field", [(FACTS, "facts"), (EVENTS, "events"), (CONFLICTS, "conflicts")])
async def test_a_bad_cursor_is_invalid_input(
    client: GraphQLClient, subject: str, query: str, field: str, cursor: str
) -> None:
    body = (await client.post(query, {"s": subject, "after": cursor})).json()
    assert body["errors"][0]["extensions"]["code"] == "INVALID_INPUT", body
    assert "Traceback" not in body["errors"][0]["message"]


async def test_a_cursor_from_another_list_only_positions_the_page(client: GraphQLClient, subject: str) -> None:
    # Cursors are keyset positions, not handles: one from another subject is a valid position.
    ids = await add_facts(client, subject, 3)
    other = await add_facts(client, subject + "-x", 1)
    cursor = (await client.execute(FACTS, {"s": subject + "-x"}))["facts"]["edges"][0]["cursor"]
    conn = (await client.execute(FACTS, {"s": subject, "after": cursor}))["facts"]
    assert [e["node"]["id"] for e in conn["edges"]] == list(reversed(ids))
    assert other
