"""Hostile bodies and headers: each answers a 4xx (or, for a bad value inside a valid request, the
GraphQL error of its typed code) with a JSON `errors[].extensions.code`, never a 5xx or INTERNAL.

Rows are written by hand beside the generated fuzz of tests/test_fuzz.py: the fuzz sends valid
GraphQL documents, these send what no schema describes (bytes that are not UTF-8, JSON that
is not an object, nesting past any parser's stack, odd content types, broken keys).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

# Statuses a malformed request may answer: a bad request, an unsupported media type, too large.
BAD_REQUEST = frozenset({400, 413, 415, 422})
# A bad value inside a well-formed request: the GraphQL error of its code (HTTP 200) or a 400.
BAD_VALUE = frozenset({200, 400})
LEAK_MARKERS = ("Traceback", 'File "', "SELECT ", "INSERT ", "asyncpg", "/work/", "site-packages", "haki_context/")

RECORD = "mutation($input: EventInput!) { recordEvent(input: $input) { id } }"
ASSERT = "mutation($input: FactInput!) { assertFact(input: $input) { outcome } }"
CONTEXT = "query($s: String!, $q: String!, $b: Int) { context(subjectId: $s, query: $q, budget: $b) { traceId } }"


@dataclass(frozen=True)
class Row:
    body: bytes
    statuses: frozenset[int]
    codes: frozenset[str] | None = None  # None: any code but INTERNAL
    headers: dict[str, str] = field(default_factory=lambda: {"content-type": "application/json"})


def raw(query: str, variables_json: str) -> bytes:
    """A request body whose variables are written as raw JSON text (to carry what json.dumps refuses)."""
    return f'{{"query": {json.dumps(query)}, "variables": {variables_json}}}'.encode()


def event_with(field_json: str) -> bytes:
    return raw(RECORD, '{"input": {"subjectId": "hostile", "kind": "note", "payload": {"t": 1}, ' + field_json + "}}")


def fact_with(field_json: str) -> bytes:
    return raw(ASSERT, '{"input": {"subjectId": "hostile", "predicate": "p", "value": 1, ' + field_json + "}}")


VALID = json.dumps({"query": "{ __typename }"}).encode()
INVALID = frozenset({"INVALID_INPUT"})
INVALID_OR_VALIDATION = frozenset({"INVALID_INPUT", "GRAPHQL_VALIDATION_FAILED"})

ROWS: dict[str, Row] = {
    # Bytes and JSON shapes.
    "invalid-utf8": Row(b'{"query": "{ __typename }", "x": "\xff\xfe\xfd"}', BAD_REQUEST),
    "invalid-utf8-in-query": Row(b'{"query": "{ fact(id: \\"\xc3\x28\\") { id } }"}', BAD_REQUEST),
    "truncated-json": Row(b'{"query": "{ __typename }"', BAD_REQUEST),
    "non-object-json-array": Row(b"[1, 2, 3]", BAD_REQUEST),
    "non-object-json-string": Row(b'"{ __typename }"', BAD_REQUEST),
    "non-object-json-number": Row(b"42", BAD_REQUEST),
    "non-object-json-null": Row(b"null", BAD_REQUEST),
    "query-not-a-string": Row(b'{"query": 42}', BAD_REQUEST),
    "variables-not-an-object": Row(b'{"query": "{ __typename }", "variables": [1]}', BAD_REQUEST),
    "deep-json-array": Row(b"[" * 100_000 + b"]" * 100_000, BAD_REQUEST),
    "deep-json-in-variables": Row(raw(RECORD, '{"input": ' + "[" * 50_000 + "]" * 50_000 + "}"), BAD_REQUEST),
    "deep-json-payload": Row(
        raw(
            RECORD, '{"input": {"subjectId": "s", "kind": "k", "payload": ' + '{"a":' * 5_000 + "1" + "}" * 5_000 + "}}"
        ),
        BAD_REQUEST | BAD_VALUE,
    ),
    "empty-body": Row(b"", BAD_REQUEST),
    "whitespace-body": Row(b"  \n ", BAD_REQUEST),
    # Numbers.
    "huge-int-variable": Row(
        raw(CONTEXT, '{"s": "s", "q": "q", "b": ' + "9" * 400 + "}"), BAD_VALUE, INVALID_OR_VALIDATION
    ),
    "huge-int-inline": Row(
        json.dumps(
            {"query": '{ context(subjectId: "s", query: "q", budget: ' + "9" * 400 + ") { traceId } }"}
        ).encode(),
        BAD_VALUE,
        INVALID_OR_VALIDATION,
    ),
    "huge-float-confidence": Row(fact_with('"confidence": 1e400'), BAD_VALUE, INVALID),
    "huge-number-in-payload": Row(
        raw(RECORD, '{"input": {"subjectId": "s", "kind": "k", "payload": {"n": 1e999}}}'), BAD_VALUE, INVALID
    ),
    "nan-budget": Row(raw(CONTEXT, '{"s": "s", "q": "q", "b": NaN}'), BAD_VALUE | BAD_REQUEST, INVALID_OR_VALIDATION),
    "nan-confidence": Row(fact_with('"confidence": NaN'), BAD_VALUE | BAD_REQUEST, INVALID),
    "infinity-confidence": Row(fact_with('"confidence": -Infinity'), BAD_VALUE | BAD_REQUEST, INVALID),
    "nan-in-payload": Row(
        raw(RECORD, '{"input": {"subjectId": "s", "kind": "k", "payload": {"n": NaN}}}'),
        BAD_VALUE | BAD_REQUEST,
        INVALID,
    ),
    "nan-fact-value": Row(
        fact_with('"mode": "ADD"').replace(b'"value": 1', b'"value": Infinity'), BAD_VALUE | BAD_REQUEST, INVALID
    ),
    # Lone surrogates (valid JSON escapes, not valid Unicode text).
    "lone-surrogate-subject": Row(raw(CONTEXT, '{"s": "a\\ud800b", "q": "q"}'), BAD_VALUE | BAD_REQUEST, INVALID),
    "lone-surrogate-query": Row(raw(CONTEXT, '{"s": "s", "q": "\\udfff"}'), BAD_VALUE | BAD_REQUEST, INVALID),
    "lone-surrogate-payload": Row(
        raw(RECORD, '{"input": {"subjectId": "s", "kind": "k", "payload": {"t": "\\ud83d"}}}'),
        BAD_VALUE | BAD_REQUEST,
        INVALID,
    ),
    "lone-surrogate-payload-key": Row(
        raw(RECORD, '{"input": {"subjectId": "s", "kind": "k", "payload": {"\\udc00": 1}}}'),
        BAD_VALUE | BAD_REQUEST,
        INVALID,
    ),
    "lone-surrogate-fact-value": Row(
        fact_with('"mode": "ADD"').replace(b'"value": 1', b'"value": "\\ud800"'), BAD_VALUE | BAD_REQUEST, INVALID
    ),
    "lone-surrogate-kind": Row(
        raw(RECORD, '{"input": {"subjectId": "s", "kind": "\\ud800", "payload": {}}}'), BAD_VALUE | BAD_REQUEST, INVALID
    ),
    # Dates outside what a timestamp holds.
    "date-year-0": Row(event_with('"occurredAt": "0000-01-01T00:00:00Z"'), BAD_VALUE, INVALID),
    "date-year-10000": Row(event_with('"occurredAt": "10000-01-01T00:00:00Z"'), BAD_VALUE, INVALID),
    "date-max-with-negative-offset": Row(event_with('"occurredAt": "9999-12-31T23:59:59-14:00"'), BAD_VALUE, INVALID),
    "date-min-with-positive-offset": Row(event_with('"occurredAt": "0001-01-01T00:00:00+14:00"'), BAD_VALUE, INVALID),
    "valid-from-max-with-negative-offset": Row(
        fact_with('"validFrom": "9999-12-31T23:59:59-12:00"'), BAD_VALUE, INVALID
    ),
    "valid-to-year-0": Row(fact_with('"validTo": "0000-06-01T00:00:00Z"'), BAD_VALUE, INVALID),
    "date-offset-out-of-range": Row(event_with('"occurredAt": "2026-01-01T00:00:00+25:00"'), BAD_VALUE, INVALID),
    # Content types.
    "content-type-text-plain": Row(VALID, BAD_REQUEST | {200}, headers={"content-type": "text/plain"}),
    "content-type-form": Row(
        b"query=%7B__typename%7D", BAD_REQUEST, headers={"content-type": "application/x-www-form-urlencoded"}
    ),
    "content-type-multipart-without-boundary": Row(VALID, BAD_REQUEST, headers={"content-type": "multipart/form-data"}),
    "content-type-xml": Row(b"<query/>", BAD_REQUEST, headers={"content-type": "application/xml"}),
    "content-type-missing": Row(VALID, BAD_REQUEST | {200}, headers={}),
    "content-type-garbage": Row(VALID, BAD_REQUEST | {200}, headers={"content-type": ";;;=\x7f"}),
    "content-type-json-wrong-charset": Row(
        VALID, BAD_REQUEST | {200}, headers={"content-type": "application/json; charset=latin-17"}
    ),
}

# Headers, against a server that requires a key (development mode off).
AUTH_ROWS: dict[str, dict[str, str]] = {
    "authorization-token-scheme": {"authorization": "Token x"},
    "authorization-bare-bearer": {"authorization": "Bearer"},
    "authorization-bearer-space": {"authorization": "Bearer "},
    "authorization-bearer-two-words": {"authorization": "Bearer a b"},
    "authorization-basic": {"authorization": "Basic dXNlcjpwYXNz"},
    "authorization-64-kib": {"authorization": "Bearer " + "k" * 65_536},
    "authorization-nul-like": {"authorization": "Bearer hk_\x01\x02"},
}


def rows() -> list[Any]:
    return list(ROWS)


def check(response: httpx.Response, statuses: frozenset[int], codes: frozenset[str] | None) -> None:
    text = response.text
    assert response.status_code < 500, f"{response.status_code}: {text[:300]}"
    assert response.status_code in statuses, f"{response.status_code} not in {sorted(statuses)}: {text[:300]}"
    for marker in LEAK_MARKERS:
        assert marker not in text, f"{marker!r} leaked: {text[:300]}"
    if response.status_code == 200 and statuses == BAD_REQUEST | {200}:
        return  # an odd content type the server chose to read as JSON: a normal answer
    assert response.headers.get("content-type", "").startswith("application/json"), (
        f"not JSON ({response.headers.get('content-type')}): {text[:300]}"
    )
    body: Any = response.json()
    errors = body.get("errors") if isinstance(body, dict) else None
    assert errors, f"no errors: {text[:300]}"
    found = [str((e.get("extensions") or {}).get("code")) for e in errors]
    assert all(c != "None" for c in found), f"an error without a code: {text[:300]}"
    assert "INTERNAL" not in found, text[:300]
    if codes is not None:
        assert found[0] in codes, f"{found[0]} not in {sorted(codes)}: {text[:300]}"


@pytest.mark.parametrize("name", rows())
async def test_hostile_body_is_a_coded_4xx(http: httpx.AsyncClient, name: str) -> None:
    row = ROWS[name]
    response = await http.post("/graphql", content=row.body, headers=row.headers)
    check(response, row.statuses, row.codes)


@pytest.mark.parametrize("name", list(AUTH_ROWS))
async def test_malformed_authorization_is_unauthenticated(keyed_http: httpx.AsyncClient, name: str) -> None:
    response = await keyed_http.post(
        "/graphql", content=VALID, headers={"content-type": "application/json", **AUTH_ROWS[name]}
    )
    check(response, frozenset({401}), frozenset({"UNAUTHENTICATED"}))


async def test_a_64_kib_header_beside_a_valid_request_is_answered(http: httpx.AsyncClient) -> None:
    headers = {"content-type": "application/json", "x-pad": "p" * 65_536}
    response = await http.post("/graphql", content=VALID, headers=headers)
    assert response.status_code in {200, 400, 431}, response.text[:300]
    if response.status_code == 200:
        assert response.json() == {"data": {"__typename": "Query"}}
    else:
        check(response, frozenset({400, 431}), None)


async def test_many_headers_beside_a_valid_request_are_answered(http: httpx.AsyncClient) -> None:
    headers = {"content-type": "application/json", **{f"x-h{i}": "v" * 64 for i in range(1_000)}}
    response = await http.post("/graphql", content=VALID, headers=headers)
    assert response.status_code < 500, response.text[:300]


async def test_a_hostile_request_leaves_no_partial_write(http: httpx.AsyncClient) -> None:
    subject = f"hostile-{uuid.uuid4().hex[:8]}"
    body = raw(
        RECORD, '{"input": {"subjectId": "' + subject + '", "kind": "k", "payload": {"t": "\\ud800", "n": NaN}}}'
    )
    await http.post("/graphql", content=body, headers={"content-type": "application/json"})
    query = "query($s: String!) { events(subjectId: $s) { edges { cursor } } }"
    response = await http.post("/graphql", json={"query": query, "variables": {"s": subject}})
    assert response.json()["data"]["events"]["edges"] == []


async def test_a_fact_valid_from_year_1_does_not_break_context(http: httpx.AsyncClient) -> None:
    subject = f"hostile-{uuid.uuid4().hex[:8]}"
    fact = {"subjectId": subject, "predicate": "p", "value": "v", "validFrom": "0001-01-01T00:00:00Z"}
    first = await http.post("/graphql", json={"query": ASSERT, "variables": {"input": fact}})
    check_any = first.json()
    assert "INTERNAL" not in json.dumps(check_any)
    response = await http.post("/graphql", json={"query": CONTEXT, "variables": {"s": subject, "q": "v"}})
    assert response.status_code == 200
    assert not response.json().get("errors"), response.text[:300]
