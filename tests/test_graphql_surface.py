"""The safe GraphQL surface: complexity limits, body size, statement timeout, switches for production."""

from __future__ import annotations

import functools
import logging
import uuid
from dataclasses import replace
from typing import Any, cast

import asyncpg
import pytest
from conftest import GraphQLClient, client_for
from contextlib_helpers import with_settings
from strawberry.extensions.validation_cache import _get_validate_cache

from haki_context.core.serving.runtime import Runtime
from haki_context.db.pool import init_connection


async def test_more_than_five_context_fields_is_query_too_complex(client: GraphQLClient, subject: str) -> None:
    fields = " ".join(f'c{i}: context(subjectId: "{subject}", query: "q") {{ traceId }}' for i in range(6))
    error = await client.error(f"{{ {fields} }}")
    assert error["extensions"]["code"] == "QUERY_TOO_COMPLEX"
    five = " ".join(f'c{i}: context(subjectId: "{subject}", query: "q") {{ traceId }}' for i in range(5))
    assert len(await client.execute(f"{{ {five} }}")) == 5


async def test_context_fields_hidden_in_fragments_count_too(client: GraphQLClient) -> None:
    fields = " ".join(f'c{i}: context(subjectId: "s", query: "q") {{ traceId }}' for i in range(3))
    query = f"query {{ ...A ... on Query {{ {fields} }} }} fragment A on Query {{ {fields} }}"
    assert (await client.error(query))["extensions"]["code"] == "QUERY_TOO_COMPLEX"


async def test_depth_over_ten_is_query_too_complex(client: GraphQLClient) -> None:
    nested = "supersededBy { " * 10 + "id" + " }" * 10
    error = await client.error(f'{{ fact(id: "{uuid.uuid4()}") {{ {nested} }} }}')
    assert error["extensions"]["code"] == "QUERY_TOO_COMPLEX"


async def test_more_than_fifteen_aliases_is_query_too_complex(client: GraphQLClient) -> None:
    aliases = " ".join(f'a{i}: fact(id: "{uuid.uuid4()}") {{ id }}' for i in range(16))
    assert (await client.error(f"{{ {aliases} }}"))["extensions"]["code"] == "QUERY_TOO_COMPLEX"


async def test_a_repeated_document_is_validated_once(client: GraphQLClient, subject: str) -> None:
    # The LRU the schema's ValidationCache(maxsize=256) shares (typed as the function it wraps).
    validate = cast("functools._lru_cache_wrapper[Any]", _get_validate_cache(256))

    query = "query Again($s: String!, $q: String!) { context(subjectId: $s, query: $q) { traceId } }"
    await client.execute(query, {"s": subject, "q": "first question"})
    before = validate.cache_info()
    await client.execute(query, {"s": subject, "q": "another question"})
    after = validate.cache_info()
    assert (after.hits, after.misses) == (before.hits + 1, before.misses)


async def test_a_too_deep_document_stays_refused_when_sent_again(client: GraphQLClient) -> None:
    nested = "supersededBy { " * 10 + "id" + " }" * 10
    query = f'{{ fact(id: "{uuid.uuid4()}") {{ {nested} }} }}'
    for _ in range(2):  # the second answer comes from the validation cache
        assert (await client.error(query))["extensions"]["code"] == "QUERY_TOO_COMPLEX"


async def test_statement_over_the_timeout_is_timeout_and_stores_nothing(
    runtime: Runtime, subject: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def init(conn: asyncpg.Connection) -> None:
        await init_connection(conn)
        await conn.execute("SET statement_timeout = 1")  # after the codecs' own queries

    pool = await asyncpg.create_pool(runtime.settings.database_url, min_size=1, max_size=2, init=init)
    slow = client_for(replace(runtime, pool=pool))
    try:
        inputs = [{"subjectId": subject, "kind": "k", "payload": {"text": "word " * 50}} for _ in range(1000)]
        with caplog.at_level(logging.WARNING, logger="haki_context.errors"):
            error = await slow.error("mutation($i: [EventInput!]!) { recordEvents(inputs: $i) { id } }", {"i": inputs})
        assert error["extensions"]["code"] == "TIMEOUT"
        # The log says why the database cancelled the statement; the response does not.
        lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("TIMEOUT:")]
        assert lines == ["TIMEOUT: canceling statement due to statement timeout"]
    finally:
        await slow.http.aclose()
        await pool.close()
    async with runtime.pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM events WHERE subject_id = $1", subject) == 0


async def test_introspection_and_ide_can_be_switched_off_for_production(runtime: Runtime) -> None:
    closed = client_for(with_settings(runtime, introspection=False, graphiql=False))
    try:
        error = await closed.error("{ __schema { queryType { name } } }")
        assert "introspection" in error["message"].lower()
        page = await closed.http.get("/graphql", headers={"accept": "text/html"})
        assert page.status_code == 404
        assert (await closed.execute('{ trace(id: "nope") { id } }'))["trace"] is None  # queries still work
    finally:
        await closed.http.aclose()


async def test_introspection_and_ide_are_on_by_default(client: GraphQLClient) -> None:
    data = await client.execute("{ __schema { queryType { name } } }")
    assert data["__schema"]["queryType"]["name"] == "Query"
    page = await client.http.get("/graphql", headers={"accept": "text/html"})
    assert page.status_code == 200 and "graphiql" in page.text.lower()
    assert "unpkg.com" not in page.text and "/static/graphiql/graphiql.min.js" in page.text
    asset = await client.http.get("/static/graphiql/graphiql.min.js")
    assert asset.status_code == 200 and len(asset.content) > 1_000_000


async def test_queries_over_get_are_refused(client: GraphQLClient) -> None:
    response = await client.http.get(
        "/graphql", params={"query": "{ __typename }"}, headers={"accept": "application/json"}
    )
    assert response.status_code in {400, 405, 404}
