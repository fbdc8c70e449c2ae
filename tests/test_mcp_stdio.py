"""`haki-context mcp`: the MCP server over stdio, spawned as an agent spawns it, driven by the
SDK's own client. It runs on the test database (HAKI_DATABASE_URL, so keys are required), one
process per key and protocol era for the whole module; the embedded-database starts are the
slow tests at the end.
"""

from __future__ import annotations

import asyncio
import json
import os
import selectors
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from conftest import ProjectClient, client_for, new_project_key
from mcp import Client, StdioServerParameters
from test_mcp import (
    ERASING_TOOL,
    MODES,
    Connect,
    conversation_scenario,
    data,
    eraser_key,
    errors_scenario,
    forget_scenario,
    time_scenario,
    tool_schemas_scenario,
)

from haki_context.core.serving.runtime import Runtime
from haki_context.db import embedded

COMMAND = [sys.executable, "-m", "haki_context.cli", "mcp"]


def server_env(**extra: str) -> dict[str, str]:
    """The spawned server's environment: the test embedder, no inherited HAKI_* settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HAKI_")}
    return {**env, "HAKI_EMBED_PROVIDER": "hashing", "HAKI_LOG_LEVEL": "warning", **extra}


class Servers:
    """One `haki-context mcp` per key and mode for the module, each with its client held open by a
    task of its own: the SDK's client must be left in the task that entered it, and a fixture's
    setup and teardown run in two."""

    def __init__(self, database_url: str) -> None:
        self._env = {"HAKI_DATABASE_URL": database_url}
        self._held: dict[tuple[str, str], tuple[Client, asyncio.Event, asyncio.Task[None]]] = {}

    def connect(self, mode: str = "auto") -> Connect:
        @asynccontextmanager
        async def connect(key: str) -> AsyncIterator[Client]:
            yield await self._client(key, mode)

        return connect

    async def _client(self, key: str, mode: str) -> Client:
        if (key, mode) not in self._held:
            env = server_env(**self._env, HAKI_API_KEY=key)
            params = StdioServerParameters(command=COMMAND[0], args=COMMAND[1:], env=env)
            ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
            done = asyncio.Event()

            async def hold() -> None:
                try:
                    async with Client(params, read_timeout_seconds=60, mode=mode) as client:
                        ready.set_result(client)
                        await done.wait()
                except BaseException as exc:
                    if not ready.done():
                        ready.set_exception(exc)
                    raise

            task = asyncio.create_task(hold())
            self._held[key, mode] = (await ready, done, task)
        return self._held[key, mode][0]

    async def close(self) -> None:
        for _, done, _task in self._held.values():
            done.set()
        await asyncio.gather(*(task for _, _, task in self._held.values()))


@pytest.fixture(scope="module")
async def servers(migrated: str) -> AsyncIterator[Servers]:
    held = Servers(migrated)
    yield held
    await held.close()


@pytest.fixture(scope="module")
async def keys(runtime: Runtime) -> tuple[str, str]:
    return (
        await new_project_key(runtime, f"project-{uuid.uuid4().hex[:12]}"),
        await new_project_key(runtime, f"project-{uuid.uuid4().hex[:12]}"),
    )


@pytest.mark.parametrize("mode", MODES)
async def test_over_stdio_a_conversation_and_a_fact_come_back_explained_and_only_to_their_project(
    servers: Servers, keys: tuple[str, str], mode: str
) -> None:
    await conversation_scenario(servers.connect(mode), *keys, mode)


async def test_over_stdio_a_past_instant_serves_the_memory_as_it_stood_and_a_replay_says_what_changed(
    servers: Servers, keys: tuple[str, str]
) -> None:
    await time_scenario(servers.connect(), *keys)


async def test_over_stdio_the_tools_and_their_errors_are_graphqls(
    servers: Servers, runtime: Runtime, keys: tuple[str, str]
) -> None:
    connect = servers.connect()
    async with connect(keys[0]) as client:
        tool_schemas_scenario((await client.list_tools()).tools)
    base = client_for(runtime)
    try:
        await errors_scenario(connect, keys[0], ProjectClient(base.http, keys[0], ""))
    finally:
        await base.http.aclose()


async def test_over_stdio_forget_subject_is_offered_to_and_run_for_a_key_allowed_to_erase_only(
    servers: Servers, runtime: Runtime, keys: tuple[str, str]
) -> None:
    await forget_scenario(servers.connect(), keys[0], await eraser_key(runtime))


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
        assert ERASING_TOOL in {t.name for t in (await client.list_tools()).tools}  # development mode may erase
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


def read_message(process: subprocess.Popen[bytes], timeout_s: float = 60) -> dict[str, object]:
    """The next JSON-RPC message on the server's standard output."""
    assert process.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        assert selector.select(timeout_s), "no answer from the server"
    line = process.stdout.readline()
    assert line, "the server closed its standard output"
    message: dict[str, object] = json.loads(line)
    return message


def send(process: subprocess.Popen[bytes], message: dict[str, object] | bytes) -> None:
    assert process.stdin is not None
    process.stdin.write((message if isinstance(message, bytes) else json.dumps(message).encode()) + b"\n")
    process.stdin.flush()


@pytest.mark.slow
def test_a_sigterm_stops_it_cleanly_and_an_oversized_message_is_dropped_alone(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    env = server_env(HAKI_DATA_DIR=str(data_dir), HAKI_MAX_BODY_BYTES="4096", HAKI_LOG_LEVEL="info")
    process = subprocess.Popen(COMMAND, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        send(
            process,
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"},
                },
            },
        )
        assert read_message(process)["id"] == 1
        send(process, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        send(process, b'{"jsonrpc": "2.0", "id": 2, "method": "ping", "params": {"pad": "' + b"x" * 10_000 + b'"}}')
        send(process, {"jsonrpc": "2.0", "id": 3, "method": "ping"})
        assert read_message(process)["id"] == 3  # the oversized message is dropped, the next one answered
        pgdata = next(p.parent for p in data_dir.rglob("postmaster.pid"))
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
    assert process.stderr is not None
    log = process.stderr.read().decode()
    assert "dropped a message of more than 4096 bytes (HAKI_MAX_BODY_BYTES)" in log
    assert not embedded.postmaster_alive(pgdata)
