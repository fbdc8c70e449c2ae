"""`haki-context mcp`: the MCP server over stdio, spawned as an agent spawns it, driven by the
SDK's own client. It runs on the test database (HAKI_DATABASE_URL, so keys are required), one
process per key; the embedded-database start is the slow test at the end.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import pytest
from conftest import ProjectClient, client_for, new_project_key
from mcp import Client, StdioServerParameters
from test_mcp import Connect, conversation_scenario, data, errors_scenario, tool_schemas_scenario

from haki_context.core.runtime import Runtime
from haki_context.db import embedded

COMMAND = [sys.executable, "-m", "haki_context.cli", "mcp"]


def server_env(**extra: str) -> dict[str, str]:
    """The spawned server's environment: the test embedder, no inherited HAKI_* settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HAKI_")}
    return {**env, "HAKI_EMBED_PROVIDER": "hashing", "HAKI_LOG_LEVEL": "warning", **extra}


def stdio_connect(env: dict[str, str]) -> Connect:
    def connect(key: str) -> AbstractAsyncContextManager[Client]:
        params = StdioServerParameters(command=COMMAND[0], args=COMMAND[1:], env=server_env(**env, HAKI_API_KEY=key))
        return Client(params, read_timeout_seconds=60)

    return connect


@pytest.fixture(scope="module")
async def keys(runtime: Runtime) -> tuple[str, str]:
    return (
        await new_project_key(runtime, f"project-{uuid.uuid4().hex[:12]}"),
        await new_project_key(runtime, f"project-{uuid.uuid4().hex[:12]}"),
    )


async def test_over_stdio_a_conversation_and_a_fact_come_back_explained_and_only_to_their_project(
    migrated: str, keys: tuple[str, str]
) -> None:
    await conversation_scenario(stdio_connect({"HAKI_DATABASE_URL": migrated}), *keys)


async def test_over_stdio_the_tools_and_their_errors_are_graphqls(
    migrated: str, runtime: Runtime, keys: tuple[str, str]
) -> None:
    connect = stdio_connect({"HAKI_DATABASE_URL": migrated})
    async with connect(keys[0]) as client:
        tool_schemas_scenario((await client.list_tools()).tools)
    base = client_for(runtime)
    try:
        await errors_scenario(connect, keys[0], ProjectClient(base.http, keys[0], ""))
    finally:
        await base.http.aclose()


def run_command(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*COMMAND, *args], env=server_env(**env), capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )


def test_a_bad_key_ends_the_start_with_one_error_line(migrated: str) -> None:
    done = run_command("--key", "not-a-key", env={"HAKI_DATABASE_URL": migrated})
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.strip().splitlines()[-1] == (
        "haki-context: error: the API key is not valid (unknown or revoked) (--key or HAKI_API_KEY)"
    )


def test_no_key_outside_development_mode_ends_the_start_with_one_error_line(migrated: str) -> None:
    done = run_command(env={"HAKI_DATABASE_URL": migrated})
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "haki-context: error: an API key is required outside development mode (--key or HAKI_API_KEY)"
    )


@asynccontextmanager
async def development_server(data_dir: Path) -> AsyncIterator[Client]:
    """`haki-context mcp` with no key on its own embedded database (development mode)."""
    params = StdioServerParameters(command=COMMAND[0], args=COMMAND[1:], env=server_env(HAKI_DATA_DIR=str(data_dir)))
    async with Client(params, read_timeout_seconds=120) as client:
        yield client


@pytest.mark.slow
async def test_in_development_mode_it_starts_the_embedded_database_and_stops_it_on_close(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    subject = f"subject-{uuid.uuid4().hex[:12]}"
    async with development_server(data_dir) as client:
        fact = data(await client.call_tool("assert_fact", {"subject": subject, "predicate": "city", "value": "Lyon"}))[
            "assertFact"
        ]["fact"]
        pgdata = next(p.parent for p in data_dir.rglob("postmaster.pid"))
        assert embedded.postmaster_alive(pgdata)
        served = data(await client.call_tool("get_context", {"subject": subject, "query": "Which city?"}))["context"]
        assert [f["id"] for f in served["facts"]] == [fact["id"]]
    # The client closed stdin: the server stopped the database it had started.
    assert not embedded.postmaster_alive(pgdata)
    assert embedded.owner_pid(data_dir) is None
