"""Hostile input through the HTTP endpoint: every malformed request is a coded 4xx with the JSON
error shape, every bad value inside a well-formed request is INVALID_INPUT naming its field,
and nothing answers HTTP 500 or INTERNAL.

A body that is no GraphQL request (not UTF-8, not JSON, not an object, a field of the wrong
type, nesting too deep, not sent as JSON) is refused before execution with HTTP 400; the API
key is checked from the headers before the body is read.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import pytest
from conftest import GraphQLClient, make_settings, new_project_key
from test_cli_errors import assert_one_error_line, free_port, run_cli

from haki_context.app import create_app
from haki_context.core.serving.runtime import Runtime
from haki_context.startup_errors import StartupError, check_dev_mode_bind

RECORD = "mutation($input: EventInput!) { recordEvent(input: $input) { id payload } }"
ASSERT = "mutation($input: FactInput!) { assertFact(input: $input) { outcome } }"
RETRACT = "mutation($id: ID!, $reason: String) { retractFact(id: $id, reason: $reason) { id } }"
FACTS = "query($s: String!) { facts(subjectId: $s) { edges { cursor } } }"
EVENTS = "query($s: String!) { events(subjectId: $s) { edges { node { payload } } } }"
CONTEXT = "query($s: String!, $q: String!) { context(subjectId: $s, query: $q) { rendered } }"
TRACES = "query($t: DateTime) { traces(since: $t) { edges { cursor } } }"
STATS = "query($t: DateTime) { stats(since: $t) { contextCalls } }"
JSON_HEADERS = {"content-type": "application/json"}


def raw(query: str, variables_json: str) -> bytes:
    """A body whose variables are raw JSON text, to carry what json.dumps would not write."""
    return f'{{"query": {json.dumps(query)}, "variables": {variables_json}}}'.encode()


def assert_bad_request(response: httpx.Response, status: int = 400, code: str = "INVALID_INPUT") -> dict[str, Any]:
    """A pre-execution refusal: `status`, and the JSON error shape every other error has."""
    assert response.status_code == status, f"{response.status_code}: {response.text[:300]}"
    assert response.headers["content-type"].startswith("application/json"), response.text[:300]
    body = response.json()
    assert body["data"] is None, body
    error: dict[str, Any]
    (error,) = body["errors"]
    assert set(error) == {"message", "extensions"}, error
    assert error["extensions"]["code"] == code, error
    return error


def assert_invalid(response: httpx.Response, field: str) -> dict[str, Any]:
    """A bad value inside a well-formed request: INVALID_INPUT naming `field`, never INTERNAL."""
    assert response.status_code < 500, response.text[:300]
    body = response.json()
    assert body.get("errors"), body
    codes = [e["extensions"]["code"] for e in body["errors"]]
    assert "INTERNAL" not in codes, body
    error: dict[str, Any] = body["errors"][0]
    assert error["extensions"]["code"] == "INVALID_INPUT", body

    assert error["extensions"].get("field") == field, body
    return error


async def events_of(http: httpx.AsyncClient, subject: str) -> list[Any]:
    response = await http.post("/graphql", json={"query": EVENTS, "variables": {"s": subject}})
    return [edge["node"]["payload"] for edge in response.json()["data"]["events"]["edges"]]


# --- R1, R2, R3 and the other malformed bodies: HTTP 400, the JSON error shape


@pytest.mark.parametrize(
    "body", [b"\xff\xfe", b'{"query": "\xc0\xaf"}', b'{"query": "{ __typename }", "x": "\xe2\x82"}']
)
async def test_a_body_that_is_not_utf8_is_a_400(http: httpx.AsyncClient, body: bytes) -> None:
    error = assert_bad_request(await http.post("/graphql", content=body, headers=JSON_HEADERS))
    assert "UTF-8" in error["message"] or "JSON" in error["message"]


@pytest.mark.parametrize("body", [b"null", b'"{ __typename }"', b"123", b"[]", b'[{"query": "{ __typename }"}]'])
async def test_json_that_is_not_an_object_is_a_400(http: httpx.AsyncClient, body: bytes) -> None:
    error = assert_bad_request(await http.post("/graphql", content=body, headers=JSON_HEADERS))
    assert "JSON object" in error["message"]


@pytest.mark.parametrize("depth", [65, 990, 5_000, 100_000])
async def test_variables_nested_past_the_limit_are_a_400(http: httpx.AsyncClient, depth: int) -> None:
    body = raw(RECORD, '{"input": ' + "[" * depth + "]" * depth + "}")
    error = assert_bad_request(await http.post("/graphql", content=body, headers=JSON_HEADERS))
    assert "deeper than" in error["message"]


async def test_a_payload_nested_within_the_limit_is_stored(http: httpx.AsyncClient) -> None:
    subject = f"deep-{uuid.uuid4().hex[:8]}"
    payload: Any = 1
    for _ in range(60):  # the body adds three levels (the body, variables, input)
        payload = {"a": payload}
    variables = {"input": {"subjectId": subject, "kind": "k", "payload": payload}}
    response = await http.post("/graphql", json={"query": RECORD, "variables": variables})
    assert not response.json().get("errors"), response.text[:300]


@pytest.mark.parametrize(
    ("body", "headers", "words"),
    [
        (b'{"query": "{ __typename }"}', {"content-type": "text/plain"}, "Content-Type"),
        (b'{"query": "{ __typename }"}', {"content-type": "application/x-www-form-urlencoded"}, "Content-Type"),
        (b'{"query": "{ __typename }"}', {"content-type": "multipart/form-data"}, "Content-Type"),
        (b'{"query": "{ __typename }"}', {}, "Content-Type"),
        (b"", JSON_HEADERS, "not valid JSON"),
        (b"  \n ", JSON_HEADERS, "not valid JSON"),
        (b"query { __typename }", JSON_HEADERS, "not valid JSON"),
        (b'{"query": "{ __typename }"', JSON_HEADERS, "not valid JSON"),
        (b'{"variables": {}}', JSON_HEADERS, "`query`"),
        (b'{"query": 42}', JSON_HEADERS, "`query`"),
        (b'{"query": null}', JSON_HEADERS, "`query`"),
        (b'{"query": "{ __typename }", "variables": [1]}', JSON_HEADERS, "`variables`"),
        (b'{"query": "{ __typename }", "variables": "{}"}', JSON_HEADERS, "`variables`"),
        (b'{"query": "{ __typename }", "operationName": 7}', JSON_HEADERS, "`operationName`"),
        (b'{"query": "{ __typename }", "extensions": 7}', JSON_HEADERS, "`extensions`"),
    ],
)
async def test_a_body_that_is_no_graphql_request_is_a_400(
    http: httpx.AsyncClient, body: bytes, headers: dict[str, str], words: str
) -> None:
    error = assert_bad_request(await http.post("/graphql", content=body, headers=headers))
    assert words in error["message"], error


async def test_a_well_formed_body_still_answers(http: httpx.AsyncClient) -> None:
    for headers in (JSON_HEADERS, {"content-type": "application/json; charset=utf-8"}):
        body = b'{"query": "query Q { __typename }", "variables": null, "operationName": "Q", "extensions": {}}'
        response = await http.post("/graphql", content=body, headers=headers)
        assert response.status_code == 200 and response.json() == {"data": {"__typename": "Query"}}


# --- R4: lone surrogates are INVALID_INPUT naming the field, and nothing is written


@pytest.mark.parametrize(
    ("query", "variables", "field"),
    [
        (RECORD, '{"input": {"subjectId": "a\\ud800", "kind": "k", "payload": {}}}', "subjectId"),
        (RECORD, '{"input": {"subjectId": "S", "kind": "\\udfffk", "payload": {}}}', "kind"),
        (RECORD, '{"input": {"subjectId": "S", "kind": "k", "payload": {"t": "a\\ud83d"}}}', "payload"),
        (RECORD, '{"input": {"subjectId": "S", "kind": "k", "payload": {"\\udc00": 1}}}', "payload"),
        (ASSERT, '{"input": {"subjectId": "a\\ud800", "predicate": "p", "value": 1}}', "subjectId"),
        (ASSERT, '{"input": {"subjectId": "S", "predicate": "p\\ud800", "value": 1}}', "predicate"),
        (ASSERT, '{"input": {"subjectId": "S", "predicate": "p", "value": ["\\ud800"]}}', "value"),
        (FACTS, '{"s": "a\\ud800"}', "subjectId"),
        (CONTEXT, '{"s": "a\\ud800", "q": "q"}', "subjectId"),
        (CONTEXT, '{"s": "S", "q": "a\\ud800"}', "query"),
        (CONTEXT, '{"s": "S", "q": "\\udfff"}', "query"),
    ],
)
async def test_a_lone_surrogate_is_invalid_input_naming_the_field(
    http: httpx.AsyncClient, query: str, variables: str, field: str
) -> None:
    subject = f"surrogate-{uuid.uuid4().hex[:8]}"
    body = raw(query, variables.replace('"S"', json.dumps(subject)))
    assert_invalid(await http.post("/graphql", content=body, headers=JSON_HEADERS), field)
    assert await events_of(http, subject) == []


async def test_a_lone_surrogate_in_a_reason_is_invalid_input(http: httpx.AsyncClient) -> None:
    subject = f"surrogate-{uuid.uuid4().hex[:8]}"
    fact = {"subjectId": subject, "predicate": "p", "value": 1}
    assert (await http.post("/graphql", json={"query": ASSERT, "variables": {"input": fact}})).status_code == 200
    query = "query($s: String!) { facts(subjectId: $s) { edges { node { id } } } }"
    found = await http.post("/graphql", json={"query": query, "variables": {"s": subject}})
    fact_id = found.json()["data"]["facts"]["edges"][0]["node"]["id"]
    body = raw(RETRACT, f'{{"id": "{fact_id}", "reason": "r\\ud800"}}')
    assert_invalid(await http.post("/graphql", content=body, headers=JSON_HEADERS), "reason")


# --- R5: dates outside the representable range once in UTC


@pytest.mark.parametrize(
    "when",
    [
        "0001-01-01T00:00:00+14:00",
        "9999-12-31T23:59:59-14:00",
        "0001-01-01T00:00:00+00:00",  # the driver would store it as -infinity
        "9999-12-31T23:59:59.999999Z",  # and this as infinity
    ],
)
@pytest.mark.parametrize(
    ("query", "make", "field"),
    [
        (RECORD, lambda s, t: {"input": {"subjectId": s, "kind": "k", "payload": {}, "occurredAt": t}}, "occurredAt"),
        (ASSERT, lambda s, t: {"input": {"subjectId": s, "predicate": "p", "value": 1, "validFrom": t}}, "validFrom"),
        (ASSERT, lambda s, t: {"input": {"subjectId": s, "predicate": "p", "value": 1, "validTo": t}}, "validTo"),
        (TRACES, lambda s, t: {"t": t}, "since"),
        (STATS, lambda s, t: {"t": t}, "since"),
    ],
)
async def test_a_date_outside_the_range_in_utc_is_invalid_input(
    http: httpx.AsyncClient, query: str, make: Any, field: str, when: str
) -> None:
    subject = f"dates-{uuid.uuid4().hex[:8]}"
    response = await http.post("/graphql", json={"query": query, "variables": make(subject, when)})
    assert_invalid(response, field)
    assert await events_of(http, subject) == []


async def test_the_extreme_dates_that_fit_are_accepted(http: httpx.AsyncClient) -> None:
    subject = f"dates-{uuid.uuid4().hex[:8]}"
    for when in ("0001-01-01T00:00:01+00:00", "9999-12-31T23:59:59+00:00", "0001-01-01T10:00:00+09:00"):
        variables = {"input": {"subjectId": subject, "kind": "k", "payload": {}, "occurredAt": when}}
        response = await http.post("/graphql", json={"query": RECORD, "variables": variables})
        assert not response.json().get("errors"), response.text[:300]
    query = "query($s: String!) { events(subjectId: $s) { edges { node { occurredAt } } } }"
    found = await http.post("/graphql", json={"query": query, "variables": {"s": subject}})
    assert sorted(e["node"]["occurredAt"] for e in found.json()["data"]["events"]["edges"]) == [
        "0001-01-01T00:00:01+00:00",
        "0001-01-01T01:00:00+00:00",
        "9999-12-31T23:59:59+00:00",
    ]


# --- R6: the literal text `\u0000` is stored as written; a real NUL stays refused


async def test_the_literal_text_of_a_nul_escape_is_stored_as_written(http: httpx.AsyncClient) -> None:
    subject = f"nul-{uuid.uuid4().hex[:8]}"
    payload = {"code": 'printf("a\\u0000b"); s = "\\\\u0000"', "\\u0000key": "x"}
    variables = {"input": {"subjectId": subject, "kind": "source", "payload": payload}}
    response = await http.post("/graphql", json={"query": RECORD, "variables": variables})
    assert not response.json().get("errors"), response.text[:300]
    assert response.json()["data"]["recordEvent"]["payload"] == payload
    assert await events_of(http, subject) == [payload]


@pytest.mark.parametrize("payload", [{"t": "a\x00b"}, {"t": "a\\\x00"}, {"k\x00": 1}, ["\x00"]])
async def test_a_real_nul_in_a_payload_is_refused(http: httpx.AsyncClient, payload: Any) -> None:
    subject = f"nul-{uuid.uuid4().hex[:8]}"
    variables = {"input": {"subjectId": subject, "kind": "k", "payload": payload}}
    error = assert_invalid(await http.post("/graphql", json={"query": RECORD, "variables": variables}), "payload")
    assert "NUL" in error["message"]
    assert await events_of(http, subject) == []


# --- R11 and numbers: NaN and Infinity are refused, never stored as null


@pytest.mark.parametrize("payload", ['{"n": NaN}', "[1, Infinity]", '{"n": -Infinity}', '{"n": 1e309}'])
async def test_nan_or_infinity_in_a_payload_is_invalid_input(http: httpx.AsyncClient, payload: str) -> None:
    subject = f"nan-{uuid.uuid4().hex[:8]}"
    body = raw(RECORD, f'{{"input": {{"subjectId": "{subject}", "kind": "k", "payload": {payload}}}}}')
    error = assert_invalid(await http.post("/graphql", content=body, headers=JSON_HEADERS), "payload")
    assert "NaN or Infinity" in error["message"]
    assert await events_of(http, subject) == []


async def test_an_infinite_literal_in_a_payload_is_invalid_input(http: httpx.AsyncClient) -> None:
    subject = f"nan-{uuid.uuid4().hex[:8]}"
    query = f'mutation {{ recordEvent(input: {{subjectId: "{subject}", kind: "k", payload: {{n: 1e999}}}}) {{ id }} }}'
    error = assert_invalid(await http.post("/graphql", json={"query": query}), "payload")
    assert "NaN or Infinity" in error["message"]
    assert await events_of(http, subject) == []


async def test_nan_in_a_fact_value_is_invalid_input(http: httpx.AsyncClient) -> None:
    body = raw(ASSERT, '{"input": {"subjectId": "s", "predicate": "p", "value": NaN}}')
    assert_invalid(await http.post("/graphql", content=body, headers=JSON_HEADERS), "value")


async def test_huge_numbers_and_deep_selections_are_coded(http: httpx.AsyncClient) -> None:
    big = raw(RECORD, '{"input": {"subjectId": "s", "kind": "k", "payload": {"n": ' + str(2**70) + "}}}")
    assert_invalid(await http.post("/graphql", content=big, headers=JSON_HEADERS), "payload")
    budget = 'query($b: Int) { context(subjectId: "s", query: "q", budget: $b) { rendered } }'
    response = await http.post("/graphql", content=raw(budget, f'{{"b": {2**70}}}'), headers=JSON_HEADERS)
    assert response.json()["errors"][0]["extensions"]["code"] == "INVALID_INPUT"
    deep = '{ fact(id: "00000000-0000-0000-0000-000000000000") ' + "{ supersededBy " * 12 + "{ id }" + " }" * 13
    response = await http.post("/graphql", json={"query": deep})
    assert response.status_code == 200
    assert response.json()["errors"][0]["extensions"]["code"] == "QUERY_TOO_COMPLEX"


# --- R12: a malformed Authorization header is UNAUTHENTICATED, in development mode too

MALFORMED_AUTHORIZATION = [
    "Token x",
    "Bearer",
    "Bearer ",
    "Bearer    ",
    "Bearer a b",
    "Basic dXNlcjpwYXNz",
    "",
    "hk_without_a_scheme",
    "Bearer " + "k" * 65_536,
]


@pytest.mark.parametrize("header", MALFORMED_AUTHORIZATION)
@pytest.mark.parametrize("mode", ["dev", "keyed"])
async def test_a_malformed_authorization_header_is_unauthenticated(
    http: httpx.AsyncClient, keyed_http: httpx.AsyncClient, header: str, mode: str
) -> None:
    client = http if mode == "dev" else keyed_http
    body = raw(RECORD, '{"input": {"subjectId": "auth-probe", "kind": "k", "payload": {}}}')
    response = await client.post("/graphql", content=body, headers={**JSON_HEADERS, "authorization": header})
    assert_bad_request(response, 401, "UNAUTHENTICATED")


async def test_repeated_authorization_headers_are_unauthenticated(runtime: Runtime, http: httpx.AsyncClient) -> None:
    key = await new_project_key(runtime, f"project-{uuid.uuid4().hex[:8]}")
    headers = [("content-type", "application/json"), ("authorization", f"Bearer {key}"), ("authorization", "Bearer x")]
    response = await http.post("/graphql", content=b'{"query": "{ __typename }"}', headers=headers)
    assert_bad_request(response, 401, "UNAUTHENTICATED")
    ok = await http.post("/graphql", content=b'{"query": "{ __typename }"}', headers=headers[:2])
    assert ok.status_code == 200 and ok.json() == {"data": {"__typename": "Query"}}


async def test_a_large_header_beside_a_valid_request_is_answered(http: httpx.AsyncClient) -> None:
    headers = {**JSON_HEADERS, "x-pad": "p" * 65_536, **{f"x-h{i}": "v" for i in range(500)}}
    response = await http.post("/graphql", content=b'{"query": "{ __typename }"}', headers=headers)
    assert response.status_code == 200 and response.json() == {"data": {"__typename": "Query"}}


# --- R9: the key is checked before the body is read; the body limit holds while reading


async def call_app(app: Any, headers: list[tuple[bytes, bytes]], receive: Any) -> tuple[int, bytes]:
    """One POST /graphql straight through the ASGI app, with `receive` as its body."""
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/graphql",
        "raw_path": b"/graphql",
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
        "app": app,
    }
    await app(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    return status, b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


@pytest.mark.parametrize("authorization", [None, "Bearer hk_unknown", "Token x"])
async def test_an_unauthenticated_request_is_answered_without_reading_its_body(
    runtime: Runtime, migrated: str, authorization: str | None
) -> None:
    app = create_app(make_settings(migrated, dev_mode=False), runtime=runtime)

    async def receive() -> dict[str, Any]:
        raise AssertionError("the body was read before the key was checked")

    headers = [(b"content-type", b"application/json"), (b"content-length", b"62914560")]
    if authorization is not None:
        headers.append((b"authorization", authorization.encode()))
    status, body = await call_app(app, headers, receive)
    assert status == 401
    assert json.loads(body)["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"


async def test_a_streamed_body_without_a_length_stops_at_the_limit(runtime: Runtime, migrated: str) -> None:
    limit = 1024 * 1024
    app = create_app(make_settings(migrated, max_body_bytes=limit), runtime=runtime)
    chunk = b"x" * 65_536
    reads = 0

    async def receive() -> dict[str, Any]:
        nonlocal reads
        reads += 1
        if reads > 10_000:
            raise AssertionError("the body was read past its limit")
        return {"type": "http.request", "body": chunk, "more_body": True}

    status, body = await call_app(app, [(b"content-type", b"application/json")], receive)
    assert status == 413
    error = json.loads(body)["errors"][0]
    assert error["extensions"]["code"] == "PAYLOAD_TOO_LARGE"
    assert "HAKI_MAX_BODY_BYTES" in error["message"] and str(limit) in error["message"]
    assert reads <= limit // len(chunk) + 1


async def test_a_declared_length_over_the_limit_is_refused_unread(runtime: Runtime, migrated: str) -> None:
    app = create_app(make_settings(migrated, max_body_bytes=1024), runtime=runtime)

    async def receive() -> dict[str, Any]:
        raise AssertionError("an over-limit body was read")

    headers = [(b"content-type", b"application/json"), (b"content-length", b"4096")]
    status, body = await call_app(app, headers, receive)
    assert status == 413
    assert json.loads(body)["errors"][0]["extensions"]["code"] == "PAYLOAD_TOO_LARGE"


# --- R8: keyless development mode only on loopback, unless allowed


def test_dev_mode_on_a_non_loopback_bind_is_one_error_line() -> None:
    result = run_cli(
        "serve", "--host", "0.0.0.0", "--port", str(free_port()), HAKI_DEV_MODE="1", HAKI_EMBED_PROVIDER="hashing"
    )
    line = assert_one_error_line(result, "HAKI_DEV_MODE", "HAKI_DEV_MODE_ON_ANY_INTERFACE", "0.0.0.0")
    assert line.endswith("(HAKI_DEV_MODE or HAKI_DEV_MODE_ON_ANY_INTERFACE)"), line


def test_dev_mode_allowed_on_any_interface_starts_with_one_warning_line() -> None:
    # The start then stops at the unreachable database, after the warning line.
    result = run_cli(
        "serve",
        "--host",
        "0.0.0.0",
        "--port",
        str(free_port()),
        HAKI_DEV_MODE="1",
        HAKI_DEV_MODE_ON_ANY_INTERFACE="1",
        HAKI_DATABASE_URL="postgresql://127.0.0.1:1/none",
        HAKI_EMBED_PROVIDER="hashing",
    )
    lines = result.stderr.splitlines()
    assert result.returncode != 0 and lines[-1].startswith("haki-context: error: "), result.stderr
    warnings = [line for line in lines if "WARNING" in line]
    assert len(warnings) == 1, result.stderr
    assert "development mode: requests without a key use project `default`" in warnings[0]


def test_the_dev_mode_bind_check() -> None:
    for host in ("127.0.0.1", "::1", "localhost", "127.0.0.2"):
        check_dev_mode_bind(host, dev_mode=True, on_any_interface=False)
    for host in ("0.0.0.0", "::", "10.0.0.1", "example.com"):
        check_dev_mode_bind(host, dev_mode=False, on_any_interface=False)
        check_dev_mode_bind(host, dev_mode=True, on_any_interface=True)
        with pytest.raises(StartupError):
            check_dev_mode_bind(host, dev_mode=True, on_any_interface=False)


async def test_a_forged_cursor_with_a_date_out_of_range_is_invalid_input(client: GraphQLClient, subject: str) -> None:
    import base64

    forged = base64.urlsafe_b64encode(b"0001-01-01T00:00:00+14:00|" + str(uuid.uuid4()).encode()).decode()
    error = await client.error(
        "query($s: String!, $a: String) { events(subjectId: $s, after: $a) { edges { cursor } } }",
        {"s": subject, "a": forged},
    )
    assert error["extensions"]["code"] == "INVALID_INPUT"
