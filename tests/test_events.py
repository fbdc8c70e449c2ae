"""recordEvent / recordEvents: stored events, their episode chunks, and all-or-nothing batches."""

from __future__ import annotations

from typing import Any

import numpy as np
from conftest import GraphQLClient

from haki_context.core.serving.runtime import Runtime

EVENT = "id subjectId kind payload occurredAt recordedAt excerpt"
RECORD = f"mutation($input: EventInput!) {{ recordEvent(input: $input) {{ {EVENT} }} }}"
RECORD_MANY = f"mutation($inputs: [EventInput!]!) {{ recordEvents(inputs: $inputs) {{ {EVENT} }} }}"
READ = f"query($id: ID!) {{ event(id: $id) {{ {EVENT} }} }}"
LIST = "query($s: String!) { events(subjectId: $s, first: 100) { edges { node { id } } } }"


async def stored_ids(client: GraphQLClient, subject: str) -> list[str]:
    return [e["node"]["id"] for e in (await client.execute(LIST, {"s": subject}))["events"]["edges"]]


async def chunk_rows(runtime: Runtime, event_ids: list[str]) -> list[dict[str, Any]]:
    async with runtime.pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT event_id::text AS event_id, chunk, subject_id, kind, text, excerpt,"
            " vector_dims(embedding) AS dims, search_vector::text AS search"
            " FROM episode_chunks WHERE project_id = 'default' AND event_id = ANY($1::uuid[])"
            " ORDER BY event_id, chunk",
            event_ids,
        )
    return [dict(r) for r in rows]


async def test_record_event_returns_the_stored_event(client: GraphQLClient, subject: str) -> None:
    payload = {"role": "user", "text": "Invoices go out in French.", "meta": {"lang": "fr"}}
    event = (
        await client.execute(
            RECORD,
            {
                "input": {
                    "subjectId": subject,
                    "kind": "conversation.message",
                    "payload": payload,
                    "occurredAt": "2026-05-01T12:30:00+02:00",
                }
            },
        )
    )["recordEvent"]
    assert event["subjectId"] == subject
    assert event["kind"] == "conversation.message"
    assert event["payload"] == payload
    assert event["occurredAt"] == "2026-05-01T10:30:00+00:00"  # UTC with offset
    assert event["excerpt"].startswith('conversation.message {"role":"user"')
    assert (await client.execute(READ, {"id": event["id"]}))["event"] == event


async def test_occurred_at_defaults_to_the_recording_time(client: GraphQLClient, subject: str) -> None:
    event = (await client.execute(RECORD, {"input": {"subjectId": subject, "kind": "note", "payload": [1, 2]}}))[
        "recordEvent"
    ]
    assert event["occurredAt"] == event["recordedAt"]
    assert event["payload"] == [1, 2]


async def test_a_conversation_recorded_in_one_call_keeps_its_order(client: GraphQLClient, subject: str) -> None:
    texts = ["Where do you live?", "In Lisbon.", "Since when?", "Since May."]
    recorded = (
        await client.execute(
            "mutation($i: [EventInput!]!) { recordEvents(inputs: $i) { id occurredAt recordedAt } }",
            {"i": [{"subjectId": subject, "kind": "conversation.message", "payload": {"text": t}} for t in texts]},
        )
    )["recordEvents"]
    times = [e["occurredAt"] for e in recorded]
    assert times == sorted(times) and len(set(times)) == 4  # a microsecond apart, in the order given
    assert times[-1] == recorded[-1]["recordedAt"]
    listed = await client.execute(
        "query($s: String!) { events(subjectId: $s) { edges { node { id } } } }", {"s": subject}
    )
    assert [e["node"]["id"] for e in listed["events"]["edges"]] == [e["id"] for e in reversed(recorded)]


async def test_excerpt_is_cut_to_300_characters(client: GraphQLClient, subject: str) -> None:
    event = (
        await client.execute(RECORD, {"input": {"subjectId": subject, "kind": "note", "payload": {"text": "w " * 400}}})
    )["recordEvent"]
    assert len(event["excerpt"]) == 300
    assert event["excerpt"].startswith('note {"text":"w w')


async def test_record_events_returns_the_events_in_input_order(client: GraphQLClient, subject: str) -> None:
    inputs = [
        {"subjectId": subject, "kind": f"kind-{i}", "payload": {"text": f"turn number {i}", "i": i}} for i in range(6)
    ]
    events = (await client.execute(RECORD_MANY, {"inputs": inputs}))["recordEvents"]
    assert [e["kind"] for e in events] == [f"kind-{i}" for i in range(6)]
    assert [e["payload"]["i"] for e in events] == list(range(6))
    assert len({e["id"] for e in events}) == 6
    for event in events:
        assert (await client.execute(READ, {"id": event["id"]}))["event"] == event
    assert sorted(await stored_ids(client, subject)) == sorted(e["id"] for e in events)


async def test_record_events_may_mix_subjects(client: GraphQLClient, subject: str) -> None:
    other = subject + "-b"
    inputs = [{"subjectId": s, "kind": "note", "payload": {"text": s}} for s in (subject, other, subject)]
    events = (await client.execute(RECORD_MANY, {"inputs": inputs}))["recordEvents"]
    assert [e["subjectId"] for e in events] == [subject, other, subject]
    assert len(await stored_ids(client, subject)) == 2
    assert await stored_ids(client, other) == [events[1]["id"]]


async def test_an_empty_batch_records_nothing(client: GraphQLClient) -> None:
    assert (await client.execute(RECORD_MANY, {"inputs": []}))["recordEvents"] == []


async def test_each_recorded_event_gets_an_embedded_searchable_chunk(
    client: GraphQLClient, runtime: Runtime, subject: str
) -> None:
    inputs = [
        {"subjectId": subject, "kind": "chat", "payload": {"role": "user", "text": "My cat is called Miso."}},
        {"subjectId": subject, "kind": "metric", "payload": {"steps": 9000}},
    ]
    events = (await client.execute(RECORD_MANY, {"inputs": inputs}))["recordEvents"]
    rows = {r["event_id"]: r for r in await chunk_rows(runtime, [e["id"] for e in events])}
    assert set(rows) == {e["id"] for e in events}
    chat, metric = rows[events[0]["id"]], rows[events[1]["id"]]
    assert chat["chunk"] == 0 and chat["subject_id"] == subject and chat["kind"] == "chat"
    assert chat["text"] == "user: My cat is called Miso."  # docs/design.md "Texts": speaker and words
    assert "'miso'" in chat["search"] and "'cat'" in chat["search"]
    assert metric["text"] == '{"steps":9000}'  # no turn text: the compact JSON
    assert chat["dims"] == metric["dims"] == 384


async def test_a_message_list_gives_one_chunk_per_message(
    client: GraphQLClient, runtime: Runtime, subject: str
) -> None:
    payload = {"messages": [{"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "Hello!"}]}
    event = (
        await client.execute(RECORD, {"input": {"subjectId": subject, "kind": "conversation", "payload": payload}})
    )["recordEvent"]
    rows = await chunk_rows(runtime, [event["id"]])
    assert [(r["chunk"], r["text"]) for r in rows] == [(0, "user: Hi there"), (1, "assistant: Hello!")]


async def test_a_batch_with_one_invalid_input_stores_nothing(
    client: GraphQLClient, runtime: Runtime, subject: str
) -> None:
    inputs = [{"subjectId": subject, "kind": "note", "payload": {"text": f"ok {i}"}} for i in range(3)]
    inputs.insert(2, {"subjectId": subject, "kind": "", "payload": {"text": "bad"}})
    err = await client.error(RECORD_MANY, {"inputs": inputs})
    assert err["extensions"]["code"] == "INVALID_INPUT"
    assert "inputs[2]" in err["extensions"].get("field", "") + err["message"]  # says which input
    assert await stored_ids(client, subject) == []
    async with runtime.pool.acquire() as conn:
        chunks = await conn.fetchval(
            "SELECT count(*) FROM episode_chunks WHERE project_id = 'default' AND subject_id = $1", subject
        )
    assert chunks == 0


async def test_a_batch_with_a_bad_date_stores_nothing(client: GraphQLClient, subject: str) -> None:
    inputs = [
        {"subjectId": subject, "kind": "note", "payload": {}, "occurredAt": "2026-01-01T00:00:00+00:00"},
        {"subjectId": subject, "kind": "note", "payload": {}, "occurredAt": "2026-01-01T00:00:00"},
    ]
    err = await client.error(RECORD_MANY, {"inputs": inputs})
    assert err["extensions"]["code"] == "INVALID_INPUT"
    assert await stored_ids(client, subject) == []


async def test_a_batch_of_1001_events_stores_nothing(client: GraphQLClient, subject: str) -> None:
    inputs = [{"subjectId": subject, "kind": "note", "payload": {"i": i}} for i in range(1001)]
    err = await client.error(RECORD_MANY, {"inputs": inputs})
    assert err["extensions"]["code"] == "INVALID_INPUT"
    assert await stored_ids(client, subject) == []


async def test_a_batch_of_1000_events_is_accepted(client: GraphQLClient, subject: str) -> None:
    inputs = [{"subjectId": subject, "kind": "note", "payload": {"i": i}} for i in range(1000)]
    events = (
        await client.execute(
            "mutation($inputs: [EventInput!]!) { recordEvents(inputs: $inputs) { id } }", {"inputs": inputs}
        )
    )["recordEvents"]
    assert len(events) == 1000
    page = await client.execute(
        "query($s: String!) { events(subjectId: $s, first: 100) { pageInfo { hasNextPage } } }", {"s": subject}
    )
    assert page["events"]["pageInfo"]["hasNextPage"] is True


async def test_list_payloads_are_stored_as_given(client: GraphQLClient, subject: str) -> None:
    payloads: list[Any] = [[5], [[1, 2]], [1, 2], ["a", {"b": [3]}], [], "text", 7, {"k": []}]
    inputs = [{"subjectId": subject, "kind": "note", "payload": p} for p in payloads]
    events = (await client.execute(RECORD_MANY, {"inputs": inputs}))["recordEvents"]
    read = [(await client.execute(READ, {"id": e["id"]}))["event"]["payload"] for e in events]
    assert read == payloads
    single = (await client.execute(RECORD, {"input": inputs[0]}))["recordEvent"]
    assert (await client.execute(READ, {"id": single["id"]}))["event"]["payload"] == [5]


async def test_every_chunk_keeps_its_own_vector_across_embedding_batches(
    client: GraphQLClient, runtime: Runtime, subject: str
) -> None:
    # More chunks than one embedding batch (64), in no order of length: the write embeds them
    # batched by length, and each must still be stored with the vector of its own text.
    words = ["apple", "kettle", "harbour", "violin", "glacier", "lantern", "meadow"]
    inputs = [
        {"subjectId": subject, "kind": "note", "payload": {"text": " ".join(words[: 1 + (i * 5) % 7]) + f" n{i}"}}
        for i in range(150)
    ]
    events = (await client.execute(RECORD_MANY, {"inputs": inputs}))["recordEvents"]
    async with runtime.pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT text, embedding FROM episode_chunks WHERE project_id = 'default' AND event_id = ANY($1::uuid[])",
            [e["id"] for e in events],
        )
    assert len(rows) == 150
    expected = runtime.embedder.encoder.encode([r["text"] for r in rows])
    for row, vector in zip(rows, expected):
        assert np.allclose(row["embedding"].to_numpy(), vector, atol=1e-6), row["text"]
