"""`haki-context serve --workers N`: N server processes on one port and one database.

The parent process binds the port, owns the embedded PostgreSQL (starts and supervises it),
applies the migrations and checks the connection budget once, then starts N worker processes
(spawned, not forked: each loads its own model and opens its own pool). Each worker serves
the inherited socket exactly as a single server does; the kernel hands each new connection to
one of them. The parent replaces a worker that dies, and on SIGTERM or Ctrl-C stops them all
(each with the shutdown grace) before it stops the database.

Work that must happen once is kept so by the database, not by the parent: migrations under an
advisory lock, background passes claimed in `background_job_runs` (core/serving/jobs.py), scope
index builds under their own lock. The same holds for several server machines.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import shutil
import signal
import socket
import tempfile
import time
from multiprocessing.process import BaseProcess
from pathlib import Path

from .app import POOL_CLOSE_TIMEOUT_S, apply_migrations, start_embedded
from .core.serving.supervisor import Supervisor
from .db import embedded
from .metrics import MULTIPROCESS_DIR
from .settings import LogLevel, Settings
from .startup_errors import StartupError, check_connection_budget, check_database

log = logging.getLogger("haki_context")

# A worker that exits this soon after its start, this many times in a row, is failing to
# start (a bad setting, the model missing): the parent stops instead of restarting it for ever.
EARLY_EXIT_S = 10.0
MOST_EARLY_EXITS = 5
# How often the parent looks at its workers.
WATCH_INTERVAL_S = 0.2
# Seconds a worker gets beyond the grace period to close its pool and exit before it is killed.
EXIT_MARGIN_S = POOL_CLOSE_TIMEOUT_S + 5.0

WORKER_LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s [worker %(process)d]: %(message)s"


def serve_workers(settings: Settings, sock: socket.socket) -> int:
    """Run `settings.workers` servers on `sock` until a stop is asked; the exit status."""
    return asyncio.run(_Parent(settings, sock).run())


class _Parent:
    """The process that starts, watches, replaces and stops the workers."""

    def __init__(self, settings: Settings, sock: socket.socket) -> None:
        self.settings = settings
        self.sock = sock
        self.context = multiprocessing.get_context("spawn")
        self.workers: dict[int, tuple[BaseProcess, float]] = {}  # slot -> (process, started at)
        self.stop = asyncio.Event()
        self.early_exits = 0
        self.metrics_dir: Path | None = None

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._asked_to_stop, sig)
        server: embedded.EmbeddedPostgres | None = None
        supervisor: asyncio.Task[None] | None = None
        try:
            server, dsn = await self._database()
            if self.stop.is_set():
                return 0
            # Checked first: a start refused for its connections leaves the schema as it was.
            await check_connection_budget(dsn, workers=self.settings.workers, pool_max_size=self.settings.pool_max_size)
            await apply_migrations(dsn)
            if server is not None and server.owned:
                # Only this process restarts the embedded server; the workers attach to it.
                supervisor = asyncio.create_task(
                    Supervisor(server, None, self.settings.database_check_interval_s).run()
                )
            self._share_metrics()
            for slot in range(self.settings.workers):
                self._start(slot)
            host = f"[{self.settings.host}]" if ":" in self.settings.host else self.settings.host
            log.info(
                "starting %d worker processes to serve GraphQL at http://%s:%s/graphql",
                self.settings.workers,
                host,
                self.settings.port,
            )
            return await self._watch()
        finally:
            await self._stop_workers()
            if supervisor is not None:
                supervisor.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await supervisor
            if server is not None:
                await asyncio.to_thread(server.close)
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
            if self.metrics_dir is not None:
                shutil.rmtree(self.metrics_dir, ignore_errors=True)

    def _share_metrics(self) -> None:
        """A folder where every worker keeps its counters, so a scrape answered by any one
        sums them all (metrics.py); an operator's own PROMETHEUS_MULTIPROC_DIR is used as it is."""
        if os.environ.get(MULTIPROCESS_DIR):
            return
        self.metrics_dir = Path(tempfile.mkdtemp(prefix="haki-context-metrics-"))
        os.environ[MULTIPROCESS_DIR] = str(self.metrics_dir)  # the workers inherit it

    async def _database(self) -> tuple[embedded.EmbeddedPostgres | None, str]:
        if self.settings.database_url:
            await check_database(self.settings.database_url)
            return None, self.settings.database_url
        server = await start_embedded(self.settings)
        return server, server.uri

    def _asked_to_stop(self, sig: signal.Signals) -> None:
        if not self.stop.is_set():
            log.info("stopping %d worker(s) (%s)", len(self.workers), sig.name)
            self.stop.set()

    def _start(self, slot: int) -> None:
        process = self.context.Process(
            target=worker_main, args=(self.settings, self.sock), name=f"haki-context worker {slot}", daemon=False
        )
        process.start()
        self.workers[slot] = (process, time.monotonic())

    async def _watch(self) -> int:
        """Replace each worker that exits, until a stop is asked; 1 when workers keep failing to start."""
        while not self.stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), WATCH_INTERVAL_S)
            if self.stop.is_set():
                break
            for slot, (process, started) in list(self.workers.items()):
                if process.exitcode is None:
                    continue
                lived = time.monotonic() - started
                self.early_exits = self.early_exits + 1 if lived < EARLY_EXIT_S else 0
                if self.early_exits >= MOST_EARLY_EXITS:
                    raise StartupError(
                        f"worker processes keep exiting within {EARLY_EXIT_S:g} s of their start"
                        f" (the last with status {process.exitcode}); their log lines above say why",
                        "HAKI_LOG_LEVEL=debug shows more",
                    )
                log.warning(
                    "worker %s exited with status %s after %.0f s; starting another",
                    process.pid,
                    process.exitcode,
                    lived,
                )
                self._start(slot)
        return 0

    async def _stop_workers(self) -> None:
        """SIGTERM to each worker (a clean stop, with the grace period), then SIGKILL to any
        still running once the grace period and the pool's closing are over."""
        running = [process for process, _ in self.workers.values() if process.exitcode is None]
        for process in running:
            with contextlib.suppress(ProcessLookupError):
                process.terminate()
        deadline = time.monotonic() + self.settings.shutdown_grace_s + EXIT_MARGIN_S
        while any(p.exitcode is None for p in running) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for process in running:
            if process.exitcode is None:
                log.warning("worker %s did not stop in time; killing it", process.pid)
                process.kill()
                await asyncio.to_thread(process.join, 5.0)
        self.workers.clear()


def worker_main(settings: Settings, sock: socket.socket) -> None:
    """One worker: a server on the inherited socket, attached to the parent's database."""
    import sys

    from .cli import cmd_serve_on, configure_logging, quiet_third_parties

    quiet_third_parties()
    configure_logging(settings.log_level or LogLevel.INFO, log_format=WORKER_LOG_FORMAT)
    # The parent asks the stop (SIGTERM); a Ctrl-C reaches the whole process group, and the
    # parent's SIGTERM that follows it is then ignored by a worker already stopping.
    sys.exit(cmd_serve_on(settings, sock))
