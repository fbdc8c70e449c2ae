"""GraphQL over HTTP as its specification says: the response type negotiated from `Accept`, and
with application/graphql-response+json a request refused before execution answered 4xx with no
`data` entry; application/json keeps 200 and `"data": null` for those."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import asyncpg
import httpx
import pytest
from conftest import client_for, make_settings

from haki_context.core.serving.runtime import Runtime
from haki_context.db.pool import init_connection
from haki_context.media_types import ResponseType, negotiate

GRAPHQL_RESPONSE = "application/graphql-response+json"
JSON = "application/json"


async def post(http: httpx.AsyncClient, body: Any, accept: str | None, **headers: str) -> httpx.Response:
    """POST `body` as JSON; `accept=None` sends no Accept header at all."""
    request = http.build_request("POST", "/graphql", json=body, headers=headers)
    if accept is None:
        del request.headers["accept"]
    else:
        request.headers["accept"] = accept
    return await http.send(request)


def media_type(response: httpx.Response) -> str:
    return response.headers["content-type"].split(";")[0].strip()


@pytest.fixture
async def down_http(runtime: Runtime, tmp_path: Any) -> AsyncIterator[httpx.AsyncClient]:
    """The app over a database that cannot be reached."""
    dsn = f"postgresql://postgres@/postgres?host={tmp_path}"  # no server listens there
    pool = await asyncpg.create_pool(dsn, min_size=0, max_size=2, init=init_connection, timeout=2.0)
    client = client_for(replace(runtime, pool=pool))
    yield client.http
    await client.http.aclose()
    await pool.close()


# ---------------------------------------------------------------- negotiation


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        (GRAPHQL_RESPONSE, GRAPHQL_RESPONSE),
        (JSON, JSON),
        (f"{JSON}; charset=utf-8", JSON),
        ("*/*", JSON),
        ("application/*", JSON),
        (None, JSON),
        (f"{GRAPHQL_RESPONSE}, {JSON}", GRAPHQL_RESPONSE),
        (f"{JSON}, {GRAPHQL_RESPONSE}", JSON),
        (f"{JSON};q=0.5, {GRAPHQL_RESPONSE}", GRAPHQL_RESPONSE),
        (f"text/html, {GRAPHQL_RESPONSE};q=0.9, */*;q=0.8", GRAPHQL_RESPONSE),
        (f"*/*, {JSON};q=0", GRAPHQL_RESPONSE),
    ],
)
async def test_the_response_type_follows_the_accept_header(
    http: httpx.AsyncClient, accept: str | None, expected: str
) -> None:
    response = await post(http, {"query": "{ __typename }"}, accept)
    assert response.status_code == 200
    assert response.headers["content-type"] == f"{expected}; charset=utf-8"
    assert response.json() == {"data": {"__typename": "Query"}}


@pytest.mark.parametrize("query", ["{ __typename }", 'mutation { retractFact(id: "x") { id } }'])
async def test_an_operation_sent_with_get_is_refused_in_the_graphql_shape(http: httpx.AsyncClient, query: str) -> None:
    response = await http.get("/graphql", params={"query": query})
    assert response.status_code == 400, response.text
    error = response.json()["errors"][0]
    assert error["extensions"]["code"] == "INVALID_INPUT" and "POST /graphql" in error["message"]
    graphiql = await http.get("/graphql", headers={"accept": "text/html"})
    assert graphiql.status_code == 200 and "graphiql" in graphiql.text.lower()  # a GET without a query: the IDE


async def test_an_accept_header_that_admits_neither_type_is_406(http: httpx.AsyncClient) -> None:
    for accept in ("text/html", f"{JSON};q=0, {GRAPHQL_RESPONSE};q=0", f"{JSON}; charset=latin1"):
        response = await post(http, {"query": "{ __typename }"}, accept)
        assert response.status_code == 406, accept
        assert media_type(response) == JSON
        (error,) = response.json()["errors"]
        assert GRAPHQL_RESPONSE in error["message"] and JSON in error["message"]


def test_a_named_type_wins_over_a_wildcard_and_q_orders_named_types() -> None:
    assert negotiate(f"*/*, {GRAPHQL_RESPONSE};q=0.1") is ResponseType.GRAPHQL_RESPONSE_JSON
    assert negotiate(f"{GRAPHQL_RESPONSE};q=0.4, {JSON};q=0.6") is ResponseType.JSON
    assert negotiate(f"{GRAPHQL_RESPONSE};q=0.6, {JSON};q=0.6") is ResponseType.GRAPHQL_RESPONSE_JSON
    assert negotiate("  ") is ResponseType.JSON
    assert negotiate(f"{JSON};q=oops") is None  # an unreadable range is dropped


# ---------------------------------------------------------------- requests refused before execution

REFUSED_BEFORE_EXECUTION = [
    pytest.param({"query": "{"}, "GRAPHQL_PARSE_FAILED", id="parse"),
    pytest.param({"query": ""}, "GRAPHQL_PARSE_FAILED", id="empty-document"),
    pytest.param({"query": "{ noSuchField }"}, "GRAPHQL_VALIDATION_FAILED", id="validation"),
    pytest.param(
        {"query": "query($id: ID!) { __typename }", "variables": {"id": None}},
        "GRAPHQL_VALIDATION_FAILED",
        id="unused-variable",
    ),
    pytest.param(
        {"query": "query($s: String!) { facts(subjectId: $s) { edges { cursor } } }", "variables": {"s": 7}},
        "INVALID_INPUT",
        id="variable-coercion",
    ),
    pytest.param(
        {"query": "query A { __typename }", "operationName": "B"}, "GRAPHQL_VALIDATION_FAILED", id="unknown-operation"
    ),
    pytest.param(
        {"query": "query A { __typename } mutation B { __typename }"},
        "GRAPHQL_VALIDATION_FAILED",
        id="several-operations-none-named",
    ),
    pytest.param({"query": " ".join(["{ __typename }"] * 700)}, "QUERY_TOO_COMPLEX", id="too-many-tokens"),
]


@pytest.mark.parametrize(("body", "code"), REFUSED_BEFORE_EXECUTION)
async def test_a_request_refused_before_execution_is_400_without_data_in_graphql_response_json(
    http: httpx.AsyncClient, body: dict[str, Any], code: str
) -> None:
    response = await post(http, body, GRAPHQL_RESPONSE)
    assert response.status_code == 400, response.text
    assert media_type(response) == GRAPHQL_RESPONSE
    answer = response.json()
    assert "data" not in answer, answer
    assert answer["errors"][0]["extensions"]["code"] == code, answer


@pytest.mark.parametrize(("body", "code"), REFUSED_BEFORE_EXECUTION)
async def test_a_request_refused_before_execution_is_200_with_null_data_in_json(
    http: httpx.AsyncClient, body: dict[str, Any], code: str
) -> None:
    response = await post(http, body, JSON)
    assert response.status_code == 200, response.text
    assert media_type(response) == JSON
    answer = response.json()
    assert answer["data"] is None
    assert answer["errors"][0]["extensions"]["code"] == code, answer


async def test_a_field_error_is_200_with_its_data_entry_in_both_types(http: httpx.AsyncClient) -> None:
    query = f'mutation {{ retractFact(id: "{uuid.uuid4()}") {{ id }} }}'
    for accept in (GRAPHQL_RESPONSE, JSON):
        response = await post(http, {"query": query}, accept)
        assert response.status_code == 200
        answer = response.json()
        assert "data" in answer and answer["data"] is None  # the operation ran; its field failed
        assert answer["errors"][0]["extensions"]["code"] == "NOT_FOUND"
        assert answer["errors"][0]["path"] == ["retractFact"]


# ---------------------------------------------------------------- refusals of the endpoint's own guards


async def test_a_body_that_is_no_graphql_request_is_400_in_both_types(http: httpx.AsyncClient) -> None:
    for accept, has_data in ((GRAPHQL_RESPONSE, False), (JSON, True)):
        request = http.build_request("POST", "/graphql", content=b'{"query": ', headers={"content-type": JSON})
        request.headers["accept"] = accept
        response = await http.send(request)
        assert response.status_code == 400
        assert media_type(response) == accept
        answer = response.json()
        assert ("data" in answer) is has_data
        assert answer["errors"][0]["extensions"]["code"] == "INVALID_INPUT"


async def test_a_missing_key_is_401_in_both_types(keyed_http: httpx.AsyncClient) -> None:
    for accept, has_data in ((GRAPHQL_RESPONSE, False), (JSON, True), ("text/html", True)):
        response = await post(keyed_http, {"query": "{ __typename }"}, accept)
        assert response.status_code == 401
        assert media_type(response) == (GRAPHQL_RESPONSE if accept == GRAPHQL_RESPONSE else JSON)
        answer = response.json()
        assert ("data" in answer) is has_data
        assert answer["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"


async def test_an_oversized_body_is_413_in_the_negotiated_type(runtime: Runtime, migrated: str) -> None:
    small = client_for(runtime, make_settings(migrated, max_body_bytes=200))
    try:
        response = await post(
            small.http, {"query": "{ __typename }", "variables": {"pad": "x" * 500}}, GRAPHQL_RESPONSE
        )
        assert response.status_code == 413
        assert media_type(response) == GRAPHQL_RESPONSE
        assert response.json() == {
            "errors": [
                {"message": response.json()["errors"][0]["message"], "extensions": {"code": "PAYLOAD_TOO_LARGE"}}
            ]
        }
    finally:
        await small.http.aclose()


async def test_a_database_down_is_503_with_retry_after_in_both_types(down_http: httpx.AsyncClient) -> None:
    query = '{ context(subjectId: "s", query: "q") { traceId } }'
    for accept in (GRAPHQL_RESPONSE, JSON):
        response = await post(down_http, {"query": query}, accept)
        assert response.status_code == 503
        assert media_type(response) == accept
        assert int(response.headers["retry-after"]) > 0
        assert response.json()["errors"][0]["extensions"]["code"] == "UNAVAILABLE"
