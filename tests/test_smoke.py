"""The server answers over HTTP: health, readiness, a write and a read."""

from __future__ import annotations

from conftest import GraphQLClient


async def test_healthz_and_readyz_answer(client: GraphQLClient) -> None:
    assert (await client.http.get("/healthz")).json() == {"status": "ok"}
    ready = await client.http.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["status"] == "ready"


async def test_recorded_event_reads_back(client: GraphQLClient, subject: str) -> None:
    data = await client.execute(
        'mutation($s: String!) { recordEvent(input: {subjectId: $s, kind: "note", payload: {text: "hi"}}) { id } }',
        {"s": subject},
    )
    event_id = data["recordEvent"]["id"]
    read = await client.execute("query($id: ID!) { event(id: $id) { id kind payload excerpt } }", {"id": event_id})
    assert read["event"] == {"id": event_id, "kind": "note", "payload": {"text": "hi"}, "excerpt": 'note {"text":"hi"}'}
