"""The embedded PostgreSQL under faults: killed mid-load it is restarted without losing an
acknowledged write; left running by a server that was killed, it is adopted and stopped."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from haki_context.app import _FailureLog
from haki_context.core.serving.supervisor import Supervisor
from haki_context.db import embedded

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/ is a folder, not a package
from benchmarks.faults import free_port, kill_postmaster, measure, start_server, stop_server, wait_ready

# Log lines that must never appear: a traceback, asyncio's lost task errors, a request's error.
NOISE = ("Traceback", "never retrieved", "internal error", "ERROR")


def _lines(log: str, needle: str) -> list[str]:
    return [line for line in log.splitlines() if needle in line]


@pytest.mark.slow
def test_a_killed_database_is_back_within_seconds_and_keeps_every_acknowledged_write() -> None:
    run = measure(kills=2, workers=3, settle=1.5, max_outage=15.0)
    assert len(run.recoveries_s) == 2 and max(run.recoveries_s) <= 15.0, run
    assert run.acknowledged_writes > 0 and run.lost_writes == 0, run
    assert run.other_errors == 0, run  # during the outage, UNAVAILABLE and nothing else
    assert run.stop_exit_code == 0 and run.database_stopped, run
    assert len(_lines(run.log, "the embedded PostgreSQL stopped (pid")) == 2, run.log
    assert len(_lines(run.log, "the embedded PostgreSQL is back after")) == 2, run.log
    for noise in NOISE:
        assert noise not in run.log, run.log


@pytest.mark.slow
def test_readyz_tells_the_truth_and_healthz_stays_live() -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="haki-ready-"))
    port = free_port()
    # A long check interval keeps the database down long enough to be seen down.
    proc = start_server(data_dir, port, HAKI_DATABASE_CHECK_INTERVAL_S="3")
    try:
        wait_ready(port, proc)
        kill_postmaster(data_dir)
        time.sleep(0.3)
        ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5)
        assert ready.status_code == 503 and ready.json()["status"] == "database unavailable"
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
        answer = httpx.post(
            f"http://127.0.0.1:{port}/graphql", json={"query": '{ context(subjectId: "s", query: "q") { traceId } }'}
        )
        assert answer.status_code == 503 and answer.json()["errors"][0]["extensions"]["code"] == "UNAVAILABLE"
        wait_ready(port, proc, timeout=15)
    finally:
        took, log = stop_server(proc)
    assert proc.returncode == 0 and took < 10, log
    assert not embedded.is_running(data_dir)
    assert len(_lines(log, "is back after")) == 1, log
    for noise in NOISE:
        assert noise not in log, log
    shutil.rmtree(data_dir, ignore_errors=True)


@pytest.mark.slow
def test_a_database_left_running_by_a_killed_server_is_adopted_and_stopped() -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="haki-orphan-"))
    port = free_port()
    try:
        first = start_server(data_dir, port)
        wait_ready(port, first)
        pid = embedded.postmaster_pid(embedded.pgdata_dir(data_dir))
        first.kill()  # SIGKILL: no chance to stop its database
        first.communicate(timeout=10)
        assert embedded.is_running(data_dir), "the database died with the server"
        assert embedded.owner_pid(data_dir) is None  # its owner is gone

        second = start_server(data_dir, port)
        wait_ready(port, second)
        assert embedded.postmaster_pid(embedded.pgdata_dir(data_dir)) == pid  # the same server, adopted
        assert embedded.owner_pid(data_dir) == second.pid
        _, log = stop_server(second, signal.SIGINT)
        assert second.returncode == 0, log
        assert "adopting the embedded PostgreSQL left running" in log, log
        assert not embedded.is_running(data_dir), "the adopted database outlived the server"
        assert pid is not None and not embedded.pid_alive(pid)
        assert not (data_dir / embedded.OWNER_FILE).exists()
    finally:
        if embedded.is_running(data_dir):
            embedded.stop(embedded.pgdata_dir(data_dir), "embedded_postgres" if os.geteuid() == 0 else None)
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.mark.slow
def test_a_database_whose_owner_lives_is_attached_and_never_stopped() -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="haki-owned-"))
    port = free_port()
    try:
        server = start_server(data_dir, port)
        wait_ready(port, server)
        attached = embedded.start(data_dir)  # as `keys` or `migrate` would, beside the server
        assert not attached.owned
        attached.close()
        assert embedded.is_running(data_dir)
        assert embedded.owner_pid(data_dir) == server.pid
        _, log = stop_server(server)
        assert server.returncode == 0, log
        assert not embedded.is_running(data_dir)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


class _FakeServer:
    """A server that stays dead: each restart fails the same way."""

    uri = "postgresql://postgres@/postgres?host=/nonexistent"
    pgdata = Path("/nonexistent/pg")

    def alive(self) -> bool:
        return False

    def postmaster_pid(self) -> int:
        return 4242

    def restart(self) -> None:
        raise OSError("no such directory")


class _FakePool:
    async def expire_connections(self) -> None:
        return None


async def test_a_database_that_stays_down_is_one_line_lost_and_one_per_failure_kind(
    caplog: pytest.LogCaptureFixture,
) -> None:
    supervisor = Supervisor(_FakeServer(), _FakePool(), interval_s=0.01)  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO, logger="haki_context"):
        for _ in range(5):
            await supervisor.check()
    assert not supervisor.up
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "the embedded PostgreSQL stopped (pid 4242); restarting it",
        "restarting the embedded PostgreSQL failed (OSError); retrying; its log is /nonexistent/pg/log",
    ]


class _FlakyServer(_FakeServer):
    """A server whose first two restarts fail in a way nobody expects, then one that works."""

    def __init__(self) -> None:
        self.restarts = 0
        self.running = False

    def alive(self) -> bool:
        return self.running

    def restart(self) -> None:
        self.restarts += 1
        if self.restarts <= 2:
            raise RuntimeError("an unexpected failure")
        self.running = True


async def test_the_supervisor_outlives_an_unexpected_failure_and_restarts_later(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = _FlakyServer()
    supervisor = Supervisor(server, _FakePool(), interval_s=0.01)  # type: ignore[arg-type]
    task = asyncio.create_task(supervisor.run())
    try:
        with caplog.at_level(logging.INFO, logger="haki_context"):
            async with asyncio.timeout(10):
                while server.restarts < 3:
                    await asyncio.sleep(0.01)
    finally:
        task.cancel()
    assert server.running  # the third restart ran: the loop went on after the two failures
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert [r.getMessage() for r in errors] == ["a check of the embedded PostgreSQL failed; checking again"]


def test_background_jobs_log_one_line_per_failure_kind(caplog: pytest.LogCaptureFixture) -> None:
    failures = _FailureLog("retention pass")
    with caplog.at_level(logging.INFO, logger="haki_context"):
        for _ in range(3):
            failures.failed(ConnectionRefusedError(111, "refused"))
        failures.succeeded()
        failures.failed(ConnectionRefusedError(111, "refused"))
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert lines == [
        ("WARNING", "retention pass failed (UNAVAILABLE: the database is unavailable; retry shortly); retrying later"),
        ("INFO", "retention pass succeeded again"),
        ("WARNING", "retention pass failed (UNAVAILABLE: the database is unavailable; retry shortly); retrying later"),
    ]
    assert all(r.exc_info is None for r in caplog.records)
