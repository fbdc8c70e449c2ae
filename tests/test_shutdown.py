"""A stop that always stops: SIGTERM ends `serve` within HAKI_SHUTDOWN_GRACE_S plus the
database's own stop, with status 0 and the embedded PostgreSQL stopped, whatever the server
was doing: a call stuck on a lock, starting up, or riding out a database crash."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest

from haki_context.db import embedded

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/ is a folder, not a package
from benchmarks.faults import free_port, kill_postmaster, start_server, stop_server, wait_ready

GRACE_S = 2.0
# Beyond the grace period: the pool's close time-out, the database's fast stop, the interpreter's exit.
SLACK_S = 6.0
RECORD = 'mutation { recordEvent(input: {subjectId: "stuck", kind: "note", payload: {text: "t"}}) { id } }'


@pytest.fixture
def data_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="haki-stop-"))
    try:
        yield path
    finally:
        if embedded.is_running(path):  # a failed test: never leave a server behind
            embedded.stop(embedded.pgdata_dir(path), "embedded_postgres" if os.geteuid() == 0 else None)
        shutil.rmtree(path, ignore_errors=True)


def _assert_stopped_cleanly(took: float, code: int | None, log: str, data_dir: Path) -> None:
    assert code == 0, log
    assert took < GRACE_S + SLACK_S, (took, log)
    assert not embedded.is_running(data_dir), log
    assert "Traceback" not in log and "never retrieved" not in log, log


def test_the_stop_of_the_embedded_database_ends_with_a_line_saying_it_stopped(
    data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="haki_context.db.embedded")
    server = embedded.start(data_dir)
    assert server.owned
    caplog.clear()
    server.close()
    lines = [r.getMessage() for r in caplog.records if r.name == "haki_context.db.embedded"]
    assert lines == [f"stopping the embedded PostgreSQL in {server.pgdata}", "embedded PostgreSQL stopped"]
    assert not embedded.is_running(data_dir)


@pytest.mark.slow
def test_sigterm_with_a_call_stuck_on_a_lock_stops_within_the_grace_period(data_dir: Path) -> None:
    port = free_port()
    proc = start_server(data_dir, port, HAKI_SHUTDOWN_GRACE_S=str(GRACE_S), HAKI_STATEMENT_TIMEOUT_MS="60000")
    wait_ready(port, proc)
    handle = embedded.start(data_dir)  # attached: the server owns the database
    assert not handle.owned

    async def hold_lock() -> asyncpg.Connection:
        conn = await asyncpg.connect(handle.uri)
        await conn.execute("BEGIN; LOCK TABLE events IN ACCESS EXCLUSIVE MODE")
        return conn

    loop = asyncio.new_event_loop()
    holder = loop.run_until_complete(hold_lock())
    answers: list[int] = []

    def stuck_call() -> None:
        try:
            answers.append(
                httpx.post(f"http://127.0.0.1:{port}/graphql", json={"query": RECORD}, timeout=30).status_code
            )
        except httpx.HTTPError:
            answers.append(-1)

    caller = threading.Thread(target=stuck_call)
    caller.start()
    try:
        time.sleep(0.5)  # the write now waits on the lock
        assert not answers
        took, log = stop_server(proc, timeout=30)
        caller.join(timeout=10)
    finally:
        with_closed = loop.run_until_complete(_close_quietly(holder))
        loop.close()
        handle.close()
    assert with_closed
    _assert_stopped_cleanly(took, proc.returncode, log, data_dir)
    assert took >= GRACE_S - 0.5, (took, log)  # the stuck call was given its grace period
    assert answers and answers[0] != 200


async def _close_quietly(conn: asyncpg.Connection) -> bool:
    # The database's stop may have ended this session already.
    with contextlib.suppress(OSError, asyncpg.InterfaceError, asyncpg.PostgresError, TimeoutError):
        await conn.close(timeout=2)
    return True


@pytest.mark.slow
def test_sigterm_while_starting_stops_the_database_it_was_starting(data_dir: Path) -> None:
    port = free_port()
    proc = start_server(data_dir, port)
    deadline = time.monotonic() + 30
    # Wait until the embedded server exists (the start is under way), then stop at once.
    while not (embedded.pgdata_dir(data_dir) / "PG_VERSION").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    took, log = stop_server(proc, timeout=40)
    _assert_stopped_cleanly(took, proc.returncode, log, data_dir)
    assert "serving GraphQL" not in log, log


@pytest.mark.slow
@pytest.mark.parametrize("wait_for_recovery", [False, True], ids=["during-outage", "after-recovery"])
def test_sigterm_around_a_database_crash_stops_in_bounded_time(data_dir: Path, wait_for_recovery: bool) -> None:
    port = free_port()
    proc = start_server(data_dir, port, HAKI_SHUTDOWN_GRACE_S=str(GRACE_S))
    wait_ready(port, proc)
    kill_postmaster(data_dir)
    if wait_for_recovery:
        time.sleep(0.3)
        wait_ready(port, proc, timeout=15)
    took, log = stop_server(proc, timeout=40)
    _assert_stopped_cleanly(took, proc.returncode, log, data_dir)
