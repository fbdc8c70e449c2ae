"""The MCP server over streamable HTTP, at /mcp of a live server, driven by the SDK's own client.

One server per module (uvicorn on a free loopback port, keys required); each test opens its
clients. The conversation scenario here is shared with the stdio tests (test_mcp_stdio.py).
"""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import httpx
import httpx2
import jsonschema
import pytest
import uvicorn
from conftest import GraphQLClient, ProjectClient, client_for, make_settings, new_project_key
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, CallToolResult
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

from haki_context.app import create_app
from haki_context.core.serving import keys as core_keys
from haki_context.core.serving.runtime import Runtime
from haki_context.db import keys as db_keys

TOOLS = {"get_context", "remember", "assert_fact", "retract_fact", "explain", "replay"}
ERASING_TOOL = "forget_subject"
MAX_BODY_BYTES = 100_000  # the live server's HAKI_MAX_BODY_BYTES
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}

Connect = Callable[[str], AbstractAsyncContextManager[Client]]


def data(result: CallToolResult) -> dict[str, Any]:
    """A successful tool result's structured content."""
    assert not result.is_error, result.content
    content: dict[str, Any] | None = result.structured_content
    assert content is not None
    return content


def error(result: CallToolResult) -> dict[str, Any]:
    """A failed tool result's first error, as GraphQL formats it."""
    assert result.is_error, result.structured_content
    assert result.structured_content is not None
    first: dict[str, Any] = result.structured_content["errors"][0]
    text = result.content[0].text  # type: ignore[union-attr]
    assert text.startswith(f"{first['extensions']['code']}: {first['message']}")
    return first


async def conversation_scenario(connect: Connect, key: str, other_key: str, mode: str) -> None:
    """Record a conversation, assert a fact, get context holding both, explain it; then the
    other project's key sees none of it. Shared by both transports."""
    subject = f"subject-{uuid.uuid4().hex[:12]}"
    async with connect(key) as client:
        versions = HANDSHAKE_PROTOCOL_VERSIONS if mode == "legacy" else MODERN_PROTOCOL_VERSIONS
        assert client.protocol_version in versions
        recorded = data(
            await client.call_tool(
                "remember",
                {
                    "subject": subject,
                    "messages": [
                        {"speaker": "Ann", "text": "Please send my invoices in French from now on."},
                        {"speaker": "assistant", "text": "Noted: your invoices will be in French."},
                    ],
                    "events": [{"kind": "crm.note", "payload": {"note": "Ann moved to Lyon"}}],
                },
            )
        )["recordEvents"]
        assert [e["kind"] for e in recorded] == ["conversation.message", "conversation.message", "crm.note"]
        asserted = data(
            await client.call_tool(
                "assert_fact",
                {
                    "subject": subject,
                    "predicate": "invoice_language",
                    "value": "French",
                    "source_event_ids": [recorded[0]["id"]],
                },
            )
        )["assertFact"]
        assert asserted["outcome"] == "CREATED"
        fact_id = asserted["fact"]["id"]

        packet = data(
            await client.call_tool(
                "get_context", {"subject": subject, "query": "Which language for invoices in French?"}
            )
        )["context"]
        served_fact = next(f for f in packet["facts"] if f["id"] == fact_id)
        assert served_fact["value"] == "French"
        assert served_fact["sourceEventIds"] == [recorded[0]["id"]]
        assert {"validFrom", "validTo"} <= served_fact.keys() and served_fact["fact"]["status"] == "ACTIVE"
        episode_ids = {e["eventId"] for e in packet["episodes"]}
        assert recorded[0]["id"] in episode_ids
        assert "French" in packet["rendered"]

        trace = data(await client.call_tool("explain", {"trace_id": packet["traceId"]}))["trace"]
        assert trace["id"] == packet["traceId"] and trace["subjectId"] == subject
        included = {(d["itemKind"], d["itemId"]) for d in trace["decisions"] if d["decision"] == "INCLUDED"}
        assert ("FACT", fact_id) in included
        assert ("EPISODE", recorded[0]["id"]) in included

        facts_read = await client.read_resource(f"haki://subjects/{subject}/facts")
        assert fact_id in facts_read.contents[0].text  # type: ignore[union-attr]
        trace_read = await client.read_resource(f"haki://traces/{packet['traceId']}")
        assert packet["traceId"] in trace_read.contents[0].text  # type: ignore[union-attr]

    async with connect(other_key) as other:
        elsewhere = data(
            await other.call_tool(
                "get_context", {"subject": subject, "query": "Which language for invoices in French?"}
            )
        )["context"]
        assert elsewhere["facts"] == [] and elsewhere["episodes"] == [] and elsewhere["rendered"] == ""
        assert data(await other.call_tool("explain", {"trace_id": packet["traceId"]}))["trace"] is None
        assert error(await other.call_tool("retract_fact", {"fact_id": fact_id}))["extensions"]["code"] == "NOT_FOUND"
        assert '"facts":[]' in (await other.read_resource(f"haki://subjects/{subject}/facts")).contents[0].text  # type: ignore[union-attr]
        with pytest.raises(MCPError) as refused:
            await other.read_resource(f"haki://traces/{packet['traceId']}")
        assert refused.value.code == INVALID_PARAMS and refused.value.data["code"] == "NOT_FOUND"


async def time_scenario(connect: Connect, key: str, other_key: str) -> None:
    """get_context as_of a past instant serves the fact as it stood then; replay reproduces a
    stored call, and compared with now says the superseded fact is gone and why. Its results fit
    the tool's output schema; another project's key finds no trace to replay. Shared by both
    transports."""
    subject = f"subject-{uuid.uuid4().hex[:12]}"
    question = {"subject": subject, "query": "Which language for invoices?"}
    async with connect(key) as client:
        schemas = {t.name: t.output_schema for t in (await client.list_tools()).tools}
        french = data(
            await client.call_tool(
                "assert_fact", {"subject": subject, "predicate": "invoice_language", "value": "French"}
            )
        )["assertFact"]["fact"]["id"]
        stored = data(await client.call_tool("get_context", {**question, "budget": 600}))["context"]
        then = data(await client.call_tool("explain", {"trace_id": stored["traceId"]}))["trace"]["createdAt"]
        german = data(
            await client.call_tool(
                "assert_fact", {"subject": subject, "predicate": "invoice_language", "value": "German"}
            )
        )["assertFact"]
        assert [f["id"] for f in german["superseded"]] == [french]

        future = error(await client.call_tool("get_context", {**question, "as_of": "2999-01-01T00:00:00+00:00"}))
        assert future["extensions"]["code"] == "INVALID_INPUT" and "future" in future["message"]
        past = data(await client.call_tool("get_context", {**question, "as_of": then}))["context"]
        assert [f["id"] for f in past["facts"]] == [french] and "German" not in past["rendered"]
        now_served = data(await client.call_tool("get_context", question))["context"]
        assert [f["id"] for f in now_served["facts"]] == [german["fact"]["id"]]

        again = data(await client.call_tool("replay", {"trace_id": stored["traceId"]}))
        jsonschema.validate(again, schemas["replay"])
        replayed = again["replay"]
        assert replayed["diff"]["identical"] and replayed["diff"]["changes"] == []
        assert replayed["packet"]["rendered"] == stored["rendered"] and not replayed["comparedWithNow"]
        assert replayed["asOf"] == then and replayed["original"]["id"] == stored["traceId"]

        result = data(await client.call_tool("replay", {"trace_id": stored["traceId"], "compare_with_now": True}))
        jsonschema.validate(result, schemas["replay"])
        now = result["replay"]
        assert now["comparedWithNow"] and not now["diff"]["identical"]
        assert (now["diff"]["removed"], now["diff"]["added"]) == (1, 1)
        changes = {c["itemId"]: c for c in now["diff"]["changes"]}
        gone = changes[french]
        assert gone["kinds"] == ["REMOVED"] and gone["after"] is None
        assert gone["before"]["fact"] == {"predicate": "invoice_language", "value": "French"}
        assert gone["why"].startswith("superseded at ") and german["fact"]["id"] in gone["why"]
        assert changes[german["fact"]["id"]]["kinds"] == ["ADDED"]

        smaller = data(await client.call_tool("replay", {"trace_id": stored["traceId"], "budget": 300}))["replay"]
        assert smaller["packet"]["budgetTokens"] == 300 and smaller["original"]["budgetTokens"] == 600

    async with connect(other_key) as other:
        refused = error(await other.call_tool("replay", {"trace_id": stored["traceId"]}))
        assert refused["extensions"]["code"] == "NOT_FOUND"


async def errors_scenario(connect: Connect, key: str, graphql: GraphQLClient) -> None:
    """Bad input gets the code and message GraphQL gives the same input."""
    subject = f"subject-{uuid.uuid4().hex[:12]}"
    unknown_trace = str(uuid.uuid4())
    cases: list[tuple[str, dict[str, Any], str, dict[str, Any]]] = [
        (
            "get_context",
            {"subject": subject, "query": "anything", "budget": 0},
            'query($s: String!) { context(subjectId: $s, query: "anything", budget: 0) { traceId } }',
            {"s": subject},
        ),
        (
            "assert_fact",
            {"subject": "", "predicate": "p", "value": 1},
            'mutation { assertFact(input: {subjectId: "", predicate: "p", value: 1}) { outcome } }',
            {},
        ),
        (
            "remember",
            {"subject": subject, "messages": [{"speaker": "Ann", "text": "hi", "occurred_at": "yesterday"}]},
            "mutation($inputs: [EventInput!]!) { recordEvents(inputs: $inputs) { id } }",
            {
                "inputs": [
                    {"subjectId": subject, "kind": "conversation.message", "payload": {}, "occurredAt": "yesterday"}
                ]
            },
        ),
        (
            "retract_fact",
            {"fact_id": str(uuid.uuid4())},
            "mutation($id: ID!) { retractFact(id: $id) { id } }",
            {"id": None},
        ),
        (
            "get_context",
            {"subject": subject, "query": "anything", "as_of": "last Tuesday"},
            'query($s: String!, $asOf: DateTime) { context(subjectId: $s, query: "anything", asOf: $asOf) { traceId } }',
            {"s": subject, "asOf": "last Tuesday"},
        ),
        (
            "replay",
            {"trace_id": unknown_trace},
            "query($id: ID!) { replay(traceId: $id) { asOf } }",
            {"id": unknown_trace},
        ),
        (
            "replay",
            {"trace_id": unknown_trace, "budget": 0},
            "query($id: ID!, $with: ReplayOverrides) { replay(traceId: $id, with: $with) { asOf } }",
            {"id": unknown_trace, "with": {"budget": 0}},
        ),
    ]
    async with connect(key) as client:
        for tool, arguments, query, variables in cases:
            if tool == "retract_fact":
                variables = {"id": arguments["fact_id"]}
            expected = await graphql.error(query, variables)
            got = error(await client.call_tool(tool, arguments))
            assert got["extensions"]["code"] == expected["extensions"]["code"], tool
            assert got["message"] == expected["message"], tool


async def forget_scenario(connect: Connect, key: str, eraser_key: str) -> None:
    """forget_subject is listed and works only for a key allowed to erase; after it, nothing of
    the subject comes back."""
    subject = f"subject-{uuid.uuid4().hex[:12]}"
    async with connect(key) as client:
        assert ERASING_TOOL not in {t.name for t in (await client.list_tools()).tools}
        refused = error(await client.call_tool(ERASING_TOOL, {"subject": subject}))
        assert refused["extensions"]["code"] == "FORBIDDEN"
        assert "erase" in refused["message"]
    async with connect(eraser_key) as eraser:
        assert ERASING_TOOL in {t.name for t in (await eraser.list_tools()).tools}
        data(
            await eraser.call_tool(
                "remember", {"subject": subject, "messages": [{"speaker": "Ann", "text": "I live in Lyon"}]}
            )
        )
        data(await eraser.call_tool("assert_fact", {"subject": subject, "predicate": "city", "value": "Lyon"}))
        before = data(
            await eraser.call_tool("get_context", {"subject": subject, "query": "Where does Ann live, Lyon?"})
        )
        forgotten = data(await eraser.call_tool(ERASING_TOOL, {"subject": subject}))["forgetSubject"]
        assert (forgotten["events"], forgotten["facts"], forgotten["traces"]) == (1, 1, 1)
        after = data(await eraser.call_tool("get_context", {"subject": subject, "query": "Where does Ann live, Lyon?"}))
        assert after["context"]["facts"] == [] and after["context"]["episodes"] == []
        assert data(await eraser.call_tool("explain", {"trace_id": before["context"]["traceId"]}))["trace"] is None


def tool_schemas_scenario(tools: list[Any]) -> None:
    """Every tool has a description and input and output schemas (valid JSON Schema)."""
    assert {t.name for t in tools} - {ERASING_TOOL} == TOOLS
    for tool in tools:
        assert len(tool.description or "") > 100, tool.name
        jsonschema.Draft202012Validator.check_schema(tool.input_schema)
        assert tool.output_schema is not None, tool.name
        jsonschema.Draft202012Validator.check_schema(tool.output_schema)
        for name, prop in tool.input_schema["properties"].items():
            assert prop.get("description"), f"{tool.name}.{name} has no description"


# --- the live server ---------------------------------------------------------------------------


class LiveServer:
    """uvicorn serving the app on a free loopback port, in this event loop."""

    def __init__(self, app: Any) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/mcp"
        self.server = uvicorn.Server(uvicorn.Config(app, lifespan="on", log_config=None, access_log=False))
        self.task: asyncio.Task[None] | None = None

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
async def live(runtime: Runtime, migrated: str) -> AsyncIterator[LiveServer]:
    settings = make_settings(migrated, dev_mode=False, max_body_bytes=MAX_BODY_BYTES)
    server = LiveServer(create_app(settings, runtime=runtime))
    await server.start()
    yield server
    await server.stop()


async def eraser_key(rt: Runtime) -> str:
    """A key of a fresh project that may also erase."""
    return await scoped_key(rt, "read", "write", "erase")


async def scoped_key(rt: Runtime, *scopes: str) -> str:
    """A key of a fresh project with these scopes only."""
    new = core_keys.generate()
    async with rt.pool.acquire() as conn:
        await db_keys.insert_key(
            conn,
            f"project-{uuid.uuid4().hex[:12]}",
            key_id=new.key_id,
            key_hash=new.key_hash,
            prefix=new.prefix,
            name=None,
            scopes=list(scopes),
        )
    return new.plain


@pytest.fixture(scope="module")
async def keys(runtime: Runtime) -> tuple[str, str]:
    return (
        await new_project_key(runtime, f"project-{uuid.uuid4().hex[:12]}"),
        await new_project_key(runtime, f"project-{uuid.uuid4().hex[:12]}"),
    )


# The SDK client's modes: `auto` settles on the current protocol (no handshake), `legacy` runs the
# initialize handshake that desktop clients still use.
MODES = ["auto", "legacy"]


def http_connect(url: str, mode: str = "auto") -> Connect:
    def connect(key: str) -> AbstractAsyncContextManager[Client]:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30)
        return Client(streamable_http_client(url, http_client=http), mode=mode)

    return connect


async def test_the_tools_are_listed_with_a_description_and_schemas(live: LiveServer, keys: tuple[str, str]) -> None:
    async with http_connect(live.url)(keys[0]) as client:
        tool_schemas_scenario((await client.list_tools()).tools)
        templates = {t.uri_template for t in (await client.list_resource_templates()).resource_templates}
    assert templates == {"haki://subjects/{subject}/facts", "haki://traces/{trace_id}"}


@pytest.mark.parametrize("mode", MODES)
async def test_a_conversation_and_a_fact_come_back_in_context_explained_and_only_to_their_project(
    live: LiveServer, keys: tuple[str, str], mode: str
) -> None:
    await conversation_scenario(http_connect(live.url, mode), *keys, mode)


async def test_bad_input_gets_graphqls_code_and_message(
    live: LiveServer, runtime: Runtime, keys: tuple[str, str]
) -> None:
    base = client_for(runtime)
    graphql = ProjectClient(base.http, keys[0], "")
    try:
        await errors_scenario(http_connect(live.url), keys[0], graphql)
    finally:
        await base.http.aclose()


async def test_a_past_instant_serves_the_memory_as_it_stood_and_a_replay_says_what_changed_since(
    live: LiveServer, keys: tuple[str, str]
) -> None:
    await time_scenario(http_connect(live.url), *keys)


async def test_get_context_counts_the_budget_in_the_tokenizer_it_names(live: LiveServer, keys: tuple[str, str]) -> None:
    subject = f"subject-{uuid.uuid4().hex[:12]}"
    async with http_connect(live.url)(keys[0]) as client:
        await client.call_tool("assert_fact", {"subject": subject, "predicate": "invoice_language", "value": "French"})
        question = {"subject": subject, "query": "Which language for invoices?", "budget": 300}
        estimated = data(await client.call_tool("get_context", question))["context"]
        counted = data(await client.call_tool("get_context", {**question, "tokenizer": "O200K_BASE"}))["context"]
        assert counted["rendered"] == estimated["rendered"] and counted["usedTokens"] != estimated["usedTokens"]
        refused = await client.call_tool("get_context", {**question, "tokenizer": "LLAMA"})
        assert refused.is_error


async def test_replay_and_get_context_need_a_key_allowed_to_read(live: LiveServer, runtime: Runtime) -> None:
    writer = await scoped_key(runtime, "write")
    async with http_connect(live.url)(writer) as client:
        for tool, arguments in (
            ("replay", {"trace_id": str(uuid.uuid4())}),
            ("get_context", {"subject": "s", "query": "anything", "as_of": "2026-01-01T00:00:00+00:00"}),
        ):
            refused = error(await client.call_tool(tool, arguments))
            assert refused["extensions"]["code"] == "FORBIDDEN", tool
            assert "read" in refused["message"], tool


async def test_forget_subject_is_offered_to_and_run_for_a_key_allowed_to_erase_only(
    live: LiveServer, runtime: Runtime, keys: tuple[str, str]
) -> None:
    await forget_scenario(http_connect(live.url), keys[0], await eraser_key(runtime))


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ({}, "an API key is required: send `Authorization: Bearer <key>`"),
        ({"Authorization": "Bearer not-a-key"}, "the API key is not valid (unknown or revoked)"),
        ({"Authorization": "Basic abc"}, "the Authorization header must be `Bearer <key>`"),
    ],
)
async def test_a_request_without_a_valid_key_is_refused_before_the_transport(
    live: LiveServer, headers: dict[str, str], message: str
) -> None:
    async with httpx.AsyncClient() as http:
        response = await http.post(
            live.url, json=INITIALIZE, headers={**headers, "Accept": "application/json, text/event-stream"}
        )
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    body = response.json()
    assert body["error"]["message"] == message
    assert body["error"]["data"] == {"code": "UNAUTHENTICATED"}


async def test_a_body_over_the_limit_is_refused(live: LiveServer, keys: tuple[str, str]) -> None:
    remember = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "remember",
            "arguments": {"subject": "s", "messages": [{"speaker": "a", "text": "x" * MAX_BODY_BYTES}]},
        },
    }
    headers = {"Authorization": f"Bearer {keys[0]}", "Accept": "application/json, text/event-stream"}
    async with httpx.AsyncClient() as http:
        response = await http.post(live.url, json=remember, headers=headers)
    assert response.status_code == 413


@pytest.mark.parametrize("method", ["GET", "DELETE"])
async def test_no_stream_is_held_open_and_no_session_kept(live: LiveServer, method: str) -> None:
    # Every request stands alone: the spec's answer for a server that offers no GET stream is 405.
    async with httpx.AsyncClient() as http:
        response = await http.request(method, live.url, headers={"Accept": "text/event-stream"})
    assert response.status_code == 405


async def test_the_sdk_client_without_a_key_cannot_connect(live: LiveServer) -> None:
    with pytest.raises(Exception):  # noqa: B017 - the SDK's error for a 401 varies by its version
        async with Client(live.url):
            pass


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"Host": "127.0.0.1:8000"}, 200),
        ({"Host": "localhost"}, 200),
        ({"Host": "attacker.example"}, 421),
        ({"Host": "127.0.0.1:8000", "Origin": "http://attacker.example"}, 403),
    ],
)
async def test_keyless_development_mode_serves_loopback_host_names_only(
    runtime: Runtime, headers: dict[str, str], status: int
) -> None:
    app = create_app(runtime.settings, runtime=runtime)  # development mode on 127.0.0.1: no key
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
            response = await http.post(
                "/mcp", json=INITIALIZE, headers={**headers, "Accept": "application/json, text/event-stream"}
            )
    assert response.status_code == status
    if status == 200:
        assert response.json()["result"]["serverInfo"]["name"] == "haki-context"
