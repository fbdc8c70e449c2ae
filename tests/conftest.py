"""Fixtures: one embedded PostgreSQL per session, a fresh subject (or project) per test.

Tests go through the GraphQL endpoint with httpx's ASGI transport, as users do.
The hashing embedder serves tests that do not judge meaning; `minilm_client`
gives the real all-MiniLM-L6-v2 for those that do.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Generator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from haki_context.app import create_app
from haki_context.core.embedding.embedder import Embedder, HashingEncoder, OnnxMiniLMEncoder
from haki_context.core.serving.runtime import Runtime, open_pool
from haki_context.db import embedded, migrate, standby
from haki_context.db.pool import init_connection, keep_session
from haki_context.settings import EmbedProvider, Settings


@pytest.fixture(autouse=True)
def root_logging_restored() -> Iterator[None]:
    """A test that runs the command line in process configures the root logger on its own
    captured stderr (logging.basicConfig(force=True)); the logger is put back after it, so no
    later record is written to that stream once it is closed."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


# The session server's log, once started: a failing test's report shows what it logged meanwhile.
_SERVER_LOG: list[Path] = []
# Lock waits past deadlock_timeout (1 s) and statements over 2 s are logged, with the process
# holding the lock: a statement that timed out then says what it waited for.
_DIAGNOSTIC_SETTINGS = "ALTER SYSTEM SET log_lock_waits = on; ALTER SYSTEM SET log_min_duration_statement = 2000;"


@pytest.fixture(scope="session")
def pg_server() -> Iterator[embedded.EmbeddedPostgres]:
    """The session's embedded PostgreSQL; its HAKI_DATA_DIR is `pg_server.pgdata.parent`."""
    # Not under pytest's tmp_path: pytest prunes old run folders, and a concurrent run
    # would delete this one's database under it.
    data_dir = Path(tempfile.mkdtemp(prefix="haki-test-"))
    server = embedded.start(data_dir)
    server._server.psql(_DIAGNOSTIC_SETTINGS + "SELECT pg_reload_conf();")
    _SERVER_LOG.append(server.pgdata / "log")
    yield server
    _SERVER_LOG.clear()
    server.close()
    shutil.rmtree(data_dir, ignore_errors=True)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed test's report carries the lines the session's PostgreSQL logged during it."""
    report = yield
    if call.when == "setup":
        item.stash[_LOG_START] = _log_size()
    elif report.failed and _SERVER_LOG:
        start = item.stash.get(_LOG_START, 0)
        with _SERVER_LOG[0].open("rb") as f:
            f.seek(start)
            lines = f.read().decode(errors="replace").splitlines()[-80:]
        if lines:
            report.sections.append(("PostgreSQL log during the test", "\n".join(lines)))
    return report


_LOG_START = pytest.StashKey[int]()


def _log_size() -> int:
    try:
        return _SERVER_LOG[0].stat().st_size if _SERVER_LOG else 0
    except OSError:
        return 0


@pytest.fixture(scope="session")
def pg_uri(pg_server: embedded.EmbeddedPostgres) -> str:
    return pg_server.uri


@pytest.fixture(scope="session")
async def standby_uri(pg_server: embedded.EmbeddedPostgres) -> AsyncIterator[str]:
    """A hot standby of the session's PostgreSQL (streaming replication), answering and in recovery."""
    data_dir = Path(tempfile.mkdtemp(prefix="haki-standby-test-"))  # not tmp_path, as pg_server's
    try:
        # The primary's OS user runs the standby too (embedded_postgres when root).
        server = await asyncio.to_thread(
            standby.create, pg_server.uri, data_dir, system_user=pg_server._server.system_user
        )
        try:
            await wait_in_recovery(server.uri)
            yield server.uri
        finally:
            await asyncio.to_thread(standby.stop, data_dir)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


async def wait_in_recovery(uri: str, timeout_s: float = 30.0) -> None:
    """Return once the server at `uri` takes connections and says pg_is_in_recovery()."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            conn = await asyncpg.connect(uri, timeout=5)
            try:
                if await conn.fetchval("SELECT pg_is_in_recovery()"):
                    return
            finally:
                await conn.close()
        except (OSError, asyncpg.PostgresError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"the standby at {uri} did not answer in recovery within {timeout_s:g} s")
        await asyncio.sleep(0.1)


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
    pool = await open_pool(pg_uri, settings, min_size=1, max_size=8)
    return Runtime(pool=pool, embedder=embedder, settings=settings)


@pytest.fixture(scope="session")
def hashing_embedder() -> Iterator[Embedder]:
    embedder = Embedder(HashingEncoder())
    yield embedder
    embedder.close()


@pytest.fixture(scope="session")
def minilm_embedder() -> Iterator[Embedder]:
    """The real all-MiniLM-L6-v2, as served by default: the shipped int8 ONNX graph (no torch needed)."""
    embedder = Embedder(OnnxMiniLMEncoder.shipped(threads=1))
    yield embedder
    embedder.close()


@pytest.fixture(scope="session")
async def runtime(migrated: str, hashing_embedder: Embedder) -> AsyncIterator[Runtime]:
    rt = await open_runtime_for(migrated, make_settings(migrated), hashing_embedder)
    yield rt
    await rt.pool.close()


@pytest.fixture(scope="session")
async def minilm_runtime(migrated: str, minilm_embedder: Embedder) -> AsyncIterator[Runtime]:
    settings = make_settings(migrated, embed_provider=EmbedProvider.ONNX)
    rt = await open_runtime_for(migrated, settings, minilm_embedder)
    yield rt
    await rt.pool.close()


# What an error message must never show: a traceback, SQL text, driver internals.
LEAK_MARKERS = (
    "Traceback",
    'File "',
    "asyncpg",
    "SELECT ",
    "INSERT ",
    "UPDATE ",
    "DELETE ",
    " FROM ",
    "WHERE ",
    "psql",
    "SQLSTATE",
    "postgres",
    "haki_context/",
    '.py"',
)


def assert_no_leak(body: Any) -> None:
    """Every error the suite provokes passes through here: none may leak internals."""
    if not isinstance(body, dict):
        return
    for error in body.get("errors") or []:
        message = str(error.get("message", ""))
        leaked = [m for m in LEAK_MARKERS if m in message]
        assert not leaked, f"error message leaks {leaked}: {message!r}"
        assert "extensions" in error and "code" in error["extensions"], f"error without a code: {error}"


class GraphQLClient:
    """A tiny GraphQL client over httpx (ASGI transport); it checks every error it sees for leaks."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http

    async def post(self, query: str, variables: dict[str, Any] | None = None, **headers: str) -> httpx.Response:
        response = await self.http.post(
            "/graphql", json={"query": query, "variables": variables or {}}, headers=headers
        )
        if response.headers.get("content-type", "").startswith("application/json"):
            assert_no_leak(response.json())
        return response

    async def execute(self, query: str, variables: dict[str, Any] | None = None, **headers: str) -> dict[str, Any]:
        """The response body; fails the test on any GraphQL error."""
        body = (await self.post(query, variables, **headers)).json()
        assert not body.get("errors"), body["errors"]
        data: dict[str, Any] = body["data"]
        return data

    async def error(self, query: str, variables: dict[str, Any] | None = None, **headers: str) -> dict[str, Any]:
        """The first error of a response that must fail."""
        body = (await self.post(query, variables, **headers)).json()
        assert body.get("errors"), f"expected an error, got {body}"
        error: dict[str, Any] = body["errors"][0]
        return error


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


async def new_project_key(rt: Runtime, project_id: str) -> str:
    """A fresh API key for `project_id` (created directly in the database)."""
    from haki_context.core.serving import keys
    from haki_context.db import keys as db_keys

    new = keys.generate()
    async with rt.pool.acquire() as conn:
        await db_keys.insert_key(
            conn, project_id, key_id=new.key_id, key_hash=new.key_hash, prefix=new.prefix, name=None
        )
    return new.plain


class ProjectClient(GraphQLClient):
    """A client whose every request carries the key of its own fresh project."""

    def __init__(self, http: httpx.AsyncClient, key: str, project_id: str) -> None:
        super().__init__(http)
        self.key = key
        self.project_id = project_id

    async def post(self, query: str, variables: dict[str, Any] | None = None, **headers: str) -> httpx.Response:
        headers.setdefault("authorization", f"Bearer {self.key}")
        return await super().post(query, variables, **headers)


@pytest.fixture
async def project_client(runtime: Runtime) -> AsyncIterator[ProjectClient]:
    """A client in a project of its own: stats and trace lists see only this test's calls."""
    project_id = f"project-{uuid.uuid4().hex[:12]}"
    key = await new_project_key(runtime, project_id)
    base = client_for(runtime)
    client = ProjectClient(base.http, key, project_id)
    yield client
    await base.http.aclose()


class StatementLog:
    """Every statement a pool's connections send, in order."""

    def __init__(self) -> None:
        self.statements: list[str] = []

    def __call__(self, record: asyncpg.connection.LoggedQuery) -> None:
        self.statements.append(record.query)

    def matching(self, text: str) -> list[str]:
        return [s for s in self.statements if text in s]

    def round_trips(self) -> list[str]:
        """Statements of the call itself: asyncpg's one-off type introspection of a new connection left out."""
        return [
            s
            for s in self.statements
            if "typeinfo" not in s and "set_config('jit'" not in s and "current_setting('jit')" not in s
        ]


@pytest.fixture
async def logged(runtime: Runtime, migrated: str) -> AsyncIterator[tuple[GraphQLClient, StatementLog]]:
    """A client whose server logs every SQL statement it sends."""
    log = StatementLog()

    async def init(conn: asyncpg.Connection) -> None:
        await init_connection(conn)
        conn.add_query_logger(log)

    pool = await asyncpg.create_pool(migrated, min_size=1, max_size=4, init=init, reset=keep_session)
    client = client_for(replace(runtime, pool=pool))
    yield client, log
    await client.http.aclose()
    await pool.close()


@pytest.fixture(scope="module")
async def http(runtime: Runtime) -> AsyncIterator[httpx.AsyncClient]:
    """A raw HTTP client of the app in development mode (no key needed), for hand-made bodies."""
    client = client_for(runtime)
    yield client.http
    await client.http.aclose()


@pytest.fixture(scope="module")
async def keyed_http(runtime: Runtime, migrated: str) -> AsyncIterator[httpx.AsyncClient]:
    """A raw HTTP client of the app outside development mode: every request needs a key."""
    client = client_for(runtime, make_settings(migrated, dev_mode=False))
    yield client.http
    await client.http.aclose()
