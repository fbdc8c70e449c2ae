"""The supervisor of the embedded PostgreSQL: notices it died, restarts it, says when it is back.

It runs beside the server only when this process owns the embedded database (started or
adopted it). With HAKI_DATABASE_URL, or on a database another live process owns, nothing is
restarted here: the pool reconnects by itself and /readyz reports the database's state.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import time

import asyncpg

from ...db.embedded import EmbeddedPostgres
from ...db.health import ping

log = logging.getLogger("haki_context.supervisor")


class Supervisor:
    """Checks the database every `interval_s`; `up` is what /readyz reports.

    Each state change is one log line: the loss, then the recovery with its duration. A
    dead postmaster is started again on the same data directory (PostgreSQL replays its WAL
    itself); a live one that does not answer (in crash recovery after a backend died) is
    only waited for, since restarting it would make the wait longer.
    """

    def __init__(self, server: EmbeddedPostgres, pool: asyncpg.Pool | None, interval_s: float) -> None:
        self._server = server
        self._pool = pool
        self._interval = max(interval_s, 0.05)
        self.up = True
        self._down_since = 0.0
        self._restart_failures: set[str] = set()

    async def run(self) -> None:
        """Check forever (the caller cancels the task when the server stops).

        A check that fails in a way it does not expect is logged (once per kind, with its
        traceback: it is a bug) and the next check runs: the supervisor must outlive its own
        failures, or a database that dies afterwards is never restarted.
        """
        failures: set[str] = set()
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self.check()
            except Exception as exc:
                if type(exc).__name__ not in failures:
                    failures.add(type(exc).__name__)
                    log.error("a check of the embedded PostgreSQL failed; checking again", exc_info=exc)

    async def check(self) -> None:
        """One check: note a loss, try a restart, or note the recovery."""
        alive = self._server.alive()
        if alive and self.up and await self._answers():
            return
        if self.up:
            self._lost(alive)
        if not alive:
            await self._restart()
            if not self._server.alive():
                return
        if await self._answers():
            await self._back()

    async def _answers(self) -> bool:
        return await ping(self._server.uri, timeout_s=max(self._interval, 1.0))

    def _lost(self, alive: bool) -> None:
        self.up = False
        self._down_since = time.monotonic()
        self._restart_failures.clear()
        if alive:
            log.warning("the embedded PostgreSQL is not answering; waiting for it")
        else:
            log.warning("the embedded PostgreSQL stopped (pid %s); restarting it", self._server.postmaster_pid())

    async def _restart(self) -> None:
        try:
            await asyncio.to_thread(self._server.restart)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
            # Old backends may still hold the shared memory for a moment: retried at the next check.
            kind = type(exc).__name__
            if kind not in self._restart_failures:
                self._restart_failures.add(kind)
                log.warning(
                    "restarting the embedded PostgreSQL failed (%s); retrying; its log is %s",
                    kind,
                    self._server.pgdata / "log",
                )

    async def _back(self) -> None:
        # The pool's connections to the dead server are replaced at their next use. (The parent
        # of several workers has no pool: each worker's pool replaces its own as they fail.)
        if self._pool is not None:
            await self._pool.expire_connections()
        self.up = True
        log.info("the embedded PostgreSQL is back after %.1f s", time.monotonic() - self._down_since)
