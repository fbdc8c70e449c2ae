"""Fixtures: one embedded PostgreSQL per session, a fresh subject (or project) per test.

Tests go through the GraphQL endpoint with httpx's ASGI transport, as users do.
The hashing embedder serves tests that do not judge meaning; `minilm_client`
gives the real all-MiniLM-L6-v2 for those that do.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from haki_context.app import create_app
from haki_context.core.embedder import Embedder, HashingEncoder, MiniLMEncoder
from haki_context.core.runtime import Runtime
from haki_context.db import embedded, migrate
from haki_context.db.pool import create_pool
from haki_context.settings import EmbedProvider, Settings


@pytest.fixture(scope="session")
def pg_uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data_dir = tmp_path_factory.mktemp("haki-data")
    server = embedded.start(data_dir)
    yield server.uri
    server.close()


@pytest.fixture(scope="session")
async def migrated(pg_uri: str) -> str:
    await migrate.apply(pg_uri)
    return pg_uri


def make_settings(pg_uri: str, **overrides: Any) -> Settings:
    base: dict[str, Any] = {
        "database_url": pg_uri,
        "embed_provider": EmbedProvider.HASHING,
        "dev_mode": True,
    }
    base.update(overrides)
    return Settings(**base)


async def open_runtime_for(pg_uri: str, settings: Settings, embedder: Embedder) -> Runtime:
    pool = await create_pool(
        pg_uri,
        min_size=1,
        max_size=8,
        statement_timeout_ms=settings.statement_timeout_ms,
        hnsw_ef_search=settings.hnsw_ef_search,
        hnsw_max_scan_tuples=settings.hnsw_max_scan_tuples,
    )
    return Runtime(pool=pool, embedder=embedder, settings=settings)


@pytest.fixture(scope="session")
def hashing_embedder() -> Iterator[Embedder]:
    embedder = Embedder(HashingEncoder())
    yield embedder
    embedder.close()


@pytest.fixture(scope="session")
def minilm_embedder() -> Iterator[Embedder]:
    embedder = Embedder(MiniLMEncoder(threads=1))
    yield embedder
    embedder.close()


@pytest.fixture(scope="session")
async def runtime(migrated: str, hashing_embedder: Embedder) -> AsyncIterator[Runtime]:
    rt = await open_runtime_for(migrated, make_settings(migrated), hashing_embedder)
    yield rt
    await rt.pool.close()


@pytest.fixture(scope="session")
async def minilm_runtime(migrated: str, minilm_embedder: Embedder) -> AsyncIterator[Runtime]:
    settings = make_settings(migrated, embed_provider=EmbedProvider.MINILM)
    rt = await open_runtime_for(migrated, settings, minilm_embedder)
    yield rt
    await rt.pool.close()


class GraphQLClient:
    """A tiny GraphQL client over httpx (ASGI transport)."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http

    async def post(self, query: str, variables: dict[str, Any] | None = None, **headers: str) -> httpx.Response:
        return await self.http.post("/graphql", json={"query": query, "variables": variables or {}}, headers=headers)

    async def execute(self, query: str, variables: dict[str, Any] | None = None, **headers: str) -> dict[str, Any]:
        """The response body; fails the test on any GraphQL error."""
        body = (await self.post(query, variables, **headers)).json()
        assert not body.get("errors"), body["errors"]
        return body["data"]

    async def error(self, query: str, variables: dict[str, Any] | None = None, **headers: str) -> dict[str, Any]:
        """The first error of a response that must fail."""
        body = (await self.post(query, variables, **headers)).json()
        assert body.get("errors"), f"expected an error, got {body}"
        return body["errors"][0]


def client_for(rt: Runtime, settings: Settings | None = None) -> GraphQLClient:
    app = create_app(settings or rt.settings, runtime=rt)
    transport = httpx.ASGITransport(app=app)
    return GraphQLClient(httpx.AsyncClient(transport=transport, base_url="http://testserver"))


@pytest.fixture
async def client(runtime: Runtime) -> AsyncIterator[GraphQLClient]:
    c = client_for(runtime)
    yield c
    await c.http.aclose()


@pytest.fixture
async def minilm_client(minilm_runtime: Runtime) -> AsyncIterator[GraphQLClient]:
    c = client_for(minilm_runtime)
    yield c
    await c.http.aclose()


@pytest.fixture
def subject() -> str:
    """A fresh subject id: tests never see each other's data."""
    return f"subject-{uuid.uuid4().hex[:12]}"
