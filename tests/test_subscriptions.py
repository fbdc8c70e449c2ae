"""`traceAdded` over graphql-transport-ws at /graphql, through a real server and WebSocket client:
the key checked at connection_init, project and subject scoping, traces written through another
app instance (as another process would), the limits, a slow subscriber dropped, and the
listening connection re-established after it was cut."""

from __future__ import annotations

import asyncio
import json
import socket
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import uvicorn
from conftest import GraphQLClient, client_for, make_settings, new_project_key
from contextlib_helpers import assert_fact
from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from haki_context.app import create_app
from haki_context.core.serving import keys as core_keys
from haki_context.core.serving.live import LiveTraces
from haki_context.core.serving.runtime import Runtime
from haki_context.db import keys as db_keys
from haki_context.db.notify import LISTENER_NAME
from haki_context.db.traces import TRACE_CHANNEL

PROTOCOL = "graphql-transport-ws"
WAIT_S = 15.0  # a guard against a hang, not a timed assertion
TRACE_ADDED = """subscription($s: String) { traceAdded(subjectId: $s) {
  id subjectId query status counts { included excluded blocked } decisions { reasonCode fact { value } }
} }"""


class LiveServer:
    """uvicorn serving the app on a free loopback port, in this event loop."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"ws://127.0.0.1:{self.sock.getsockname()[1]}/graphql"
        self.server = uvicorn.Server(uvicorn.Config(app, lifespan="on", log_config=None, access_log=False))
        self.task: asyncio.Task[None] | None = None

    @property
    def live(self) -> LiveTraces:
        hub: LiveTraces = self.app.state.live
        return hub

    async def start(self) -> None:
        self.task = asyncio.create_task(self.server.serve(sockets=[self.sock]))
        while not self.server.started:
            assert not self.task.done(), "the server did not start"
            await asyncio.sleep(0.02)

    async def stop(self) -> None:
        self.server.should_exit = True
        assert self.task is not None
        await self.task
        self.sock.close()


@pytest.fixture(scope="module")
async def server(runtime: Runtime, migrated: str) -> AsyncIterator[LiveServer]:
    settings = make_settings(migrated, dev_mode=False, subscriptions_per_key=2, subscription_buffer=5)
    live = LiveServer(create_app(settings, runtime=runtime))
    await live.start()
    yield live
    await live.stop()


@pytest.fixture(scope="module")
async def writer(runtime: Runtime, migrated: str) -> AsyncIterator[GraphQLClient]:
    """Another app instance on the same database: what it writes reaches the server only through PostgreSQL."""
    client = client_for(runtime, make_settings(migrated, dev_mode=False))
    yield client
    await client.http.aclose()


class Writer:
    """Context calls of one project, made through the other app instance."""

    def __init__(self, client: GraphQLClient, key: str) -> None:
        self.client, self.key = client, key

    async def call(self, subject: str, query: str = "apples") -> str:
        data = await self.client.execute(
            "query($s: String!, $q: String!) { context(subjectId: $s, query: $q) { traceId } }",
            {"s": subject, "q": query},
            authorization=f"Bearer {self.key}",
        )
        trace_id: str = data["context"]["traceId"]
        return trace_id

    async def fact(self, subject: str, value: str) -> None:
        self.client.http.headers["authorization"] = f"Bearer {self.key}"
        try:
            await assert_fact(self.client, subject, "likes", value)
        finally:
            del self.client.http.headers["authorization"]


async def project(rt: Runtime, writer: GraphQLClient) -> tuple[str, Writer]:
    key = await new_project_key(rt, f"project-{uuid.uuid4().hex[:12]}")
    return key, Writer(writer, key)


async def receive(ws: ClientConnection) -> dict[str, Any]:
    message: dict[str, Any] = json.loads(await asyncio.wait_for(ws.recv(), WAIT_S))
    return message


async def open_socket(server: LiveServer, key: str | None, *, header: bool = False) -> ClientConnection:
    """A socket past connection_init (the key in its payload, or in the upgrade's header)."""
    headers = {"Authorization": f"Bearer {key}"} if key and header else None
    ws = await connect(server.url, subprotocols=[PROTOCOL], additional_headers=headers)  # type: ignore[list-item]
    payload = {"Authorization": f"Bearer {key}"} if key and not header else {}
    await ws.send(json.dumps({"type": "connection_init", "payload": payload}))
    return ws


async def subscribe(server: LiveServer, ws: ClientConnection, subject: str | None = None, op: str = "1") -> None:
    """Subscribe, and wait until the server holds the subscription and listens."""
    before = server.live.open
    await ws.send(
        json.dumps({"id": op, "type": "subscribe", "payload": {"query": TRACE_ADDED, "variables": {"s": subject}}})
    )
    async with asyncio.timeout(WAIT_S):
        while server.live.open <= before:
            await asyncio.sleep(0.01)
        await server.live.listening.wait()


async def closed_with(ws: ClientConnection) -> int | None:
    with pytest.raises(ConnectionClosed) as closed:
        await receive(ws)
    return closed.value.rcvd.code if closed.value.rcvd else None


async def test_a_trace_written_elsewhere_reaches_the_subscriber_of_its_project_only(
    server: LiveServer, runtime: Runtime, writer: GraphQLClient
) -> None:
    key_a, a = await project(runtime, writer)
    key_b, b = await project(runtime, writer)
    await a.fact("ann", "apples")
    ws_a, ws_b = await open_socket(server, key_a), await open_socket(server, key_b, header=True)
    try:
        assert (await receive(ws_a))["type"] == "connection_ack"
        assert (await receive(ws_b))["type"] == "connection_ack"
        await subscribe(server, ws_a)
        await subscribe(server, ws_b)
        from_b = await b.call("bob")
        from_a = await a.call("ann")
        got_a, got_b = await receive(ws_a), await receive(ws_b)
        assert got_a["type"] == "next" and got_a["id"] == "1"
        trace = got_a["payload"]["data"]["traceAdded"]
        assert trace["id"] == from_a and trace["subjectId"] == "ann" and trace["query"] == "apples"
        assert trace["counts"]["included"] == 1 and trace["decisions"][0]["fact"] == {"value": "apples"}
        assert got_b["payload"]["data"]["traceAdded"]["id"] == from_b  # B's subscriber saw B's only
        assert not got_a["payload"].get("errors") and not got_b["payload"].get("errors")
    finally:
        await ws_a.close()
        await ws_b.close()


async def test_the_subject_filter_passes_only_that_subjects_traces(
    server: LiveServer, runtime: Runtime, writer: GraphQLClient
) -> None:
    key, a = await project(runtime, writer)
    ws = await open_socket(server, key)
    try:
        assert (await receive(ws))["type"] == "connection_ack"
        await subscribe(server, ws, "wanted")
        await a.call("other")
        wanted = await a.call("wanted")
        got = await receive(ws)
        assert got["payload"]["data"]["traceAdded"]["id"] == wanted
        assert got["payload"]["data"]["traceAdded"]["subjectId"] == "wanted"
    finally:
        await ws.close()


async def test_a_socket_without_a_valid_key_is_closed_4401(server: LiveServer) -> None:
    for key in (None, "hk_not-a-key"):
        ws = await open_socket(server, key)
        assert await closed_with(ws) == 4401


async def test_a_key_without_the_read_scope_is_closed_4403(server: LiveServer, runtime: Runtime) -> None:
    new = core_keys.generate()
    async with runtime.pool.acquire() as conn:
        await db_keys.insert_key(
            conn,
            f"project-{uuid.uuid4().hex[:12]}",
            key_id=new.key_id,
            key_hash=new.key_hash,
            prefix=new.prefix,
            name=None,
            scopes=["write"],
        )
    ws = await open_socket(server, new.plain)
    assert await closed_with(ws) == 4403


async def test_a_subscription_over_http_post_is_refused_with_a_code(writer: GraphQLClient, runtime: Runtime) -> None:
    key = await new_project_key(runtime, f"project-{uuid.uuid4().hex[:12]}")
    body = (await writer.post(TRACE_ADDED, authorization=f"Bearer {key}")).json()
    assert body["errors"][0]["extensions"]["code"] == "INVALID_INPUT" and "WebSocket" in body["errors"][0]["message"]


async def test_a_subscribe_before_connection_init_is_closed_4401(server: LiveServer) -> None:
    async with connect(server.url, subprotocols=[PROTOCOL]) as ws:  # type: ignore[list-item]
        await ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": {"query": TRACE_ADDED}}))
        assert await closed_with(ws) == 4401


async def test_a_key_holds_at_most_its_limit_of_subscriptions(
    server: LiveServer, runtime: Runtime, writer: GraphQLClient
) -> None:
    key, _ = await project(runtime, writer)
    ws = await open_socket(server, key)
    other = await open_socket(server, key)
    try:
        assert (await receive(ws))["type"] == "connection_ack"
        assert (await receive(other))["type"] == "connection_ack"
        await subscribe(server, ws, op="1")
        await subscribe(server, other, op="2")  # the limit (2) counts the key's subscriptions on every socket
        await ws.send(json.dumps({"id": "3", "type": "subscribe", "payload": {"query": TRACE_ADDED}}))
        refused = await receive(ws)
        assert refused["id"] == "3" and refused["type"] == "next"
        assert refused["payload"]["errors"][0]["extensions"]["code"] == "UNAVAILABLE"
        assert "HAKI_SUBSCRIPTIONS_PER_KEY" in refused["payload"]["errors"][0]["message"]
        assert (await receive(ws)) == {"id": "3", "type": "complete"}
        await ws.send(json.dumps({"id": "1", "type": "complete"}))  # one freed: a new one is taken
        async with asyncio.timeout(WAIT_S):
            while server.live.open > 1:
                await asyncio.sleep(0.01)
        await subscribe(server, ws, op="4")
    finally:
        await ws.close()
        await other.close()


async def test_a_subscriber_that_falls_behind_is_dropped(
    server: LiveServer, runtime: Runtime, writer: GraphQLClient
) -> None:
    key, _ = await project(runtime, writer)
    ws = await open_socket(server, key)
    try:
        assert (await receive(ws))["type"] == "connection_ack"
        await subscribe(server, ws)
        # A burst of 200 announcements in one commit, against a buffer of 5.
        async with runtime.pool.acquire() as conn:
            owner = await conn.fetchval("SELECT project_id FROM api_keys WHERE key_hash = $1", core_keys.hash_key(key))
            await conn.execute(
                "SELECT pg_notify($1, json_build_array($2::text, gen_random_uuid()::text, 'ann')::text)"
                " FROM generate_series(1, 200)",
                TRACE_CHANNEL,
                owner,
            )
        dropped = await receive(ws)
        assert dropped["type"] == "next", dropped
        error = dropped["payload"]["errors"][0]
        assert error["extensions"]["code"] == "UNAVAILABLE" and "HAKI_SUBSCRIPTION_BUFFER" in error["message"]
        assert (await receive(ws)) == {"id": "1", "type": "complete"}
        async with asyncio.timeout(WAIT_S):
            while server.live.open:  # its place is given back
                await asyncio.sleep(0.01)
    finally:
        await ws.close()


async def test_the_listener_listens_again_after_its_connection_is_cut(
    server: LiveServer, runtime: Runtime, writer: GraphQLClient
) -> None:
    key, a = await project(runtime, writer)
    ws = await open_socket(server, key)
    try:
        assert (await receive(ws))["type"] == "connection_ack"
        await subscribe(server, ws)
        before = server.live.reconnects
        async with runtime.pool.acquire() as conn:
            # By its name, not its last statement: a ping may have followed its LISTEN.
            cut = await conn.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE application_name = $1 AND backend_type = 'client backend'",
                LISTENER_NAME,
            )
        assert cut == 1  # one listening connection in this process, whatever the subscribers
        async with asyncio.timeout(WAIT_S):
            while server.live.reconnects == before or not server.live.listening.is_set():
                await asyncio.sleep(0.01)
        written = await a.call("ann")
        got = await receive(ws)
        assert got["payload"]["data"]["traceAdded"]["id"] == written
    finally:
        await ws.close()


async def test_a_page_on_another_origin_opens_the_socket_only_when_it_is_allowed(
    runtime: Runtime, migrated: str
) -> None:
    settings = make_settings(migrated, cors_origins="https://dash.example.com")
    live = LiveServer(create_app(settings, runtime=runtime))
    await live.start()
    try:
        async with connect(live.url, subprotocols=[PROTOCOL], origin="https://dash.example.com") as ws:  # type: ignore[list-item,arg-type]
            await ws.send(json.dumps({"type": "connection_init"}))  # development mode: no key needed
            assert (await receive(ws))["type"] == "connection_ack"
        with pytest.raises(InvalidStatus) as refused:
            await connect(live.url, subprotocols=[PROTOCOL], origin="https://elsewhere.example.com")  # type: ignore[list-item,arg-type]
        assert refused.value.response.status_code == 403
    finally:
        await live.stop()


async def test_open_subscriptions_are_a_metric(server: LiveServer, runtime: Runtime, writer: GraphQLClient) -> None:
    key, _ = await project(runtime, writer)
    metrics_url = server.url.replace("ws://", "http://").replace("/graphql", "/metrics")

    async def open_now() -> float:
        async with httpx.AsyncClient() as http:
            text = (await http.get(metrics_url, headers={"authorization": f"Bearer {key}"})).text
        return next(
            s.value
            for f in text_string_to_metric_families(text)
            for s in f.samples
            if s.name == "haki_subscriptions_open"
        )

    before = await open_now()
    ws = await open_socket(server, key)
    try:
        assert (await receive(ws))["type"] == "connection_ack"
        await subscribe(server, ws)
        assert await open_now() == before + 1
    finally:
        await ws.close()
