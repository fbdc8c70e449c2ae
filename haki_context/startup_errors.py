"""Operator errors met before or outside serving, each told as one line that names what to change.

`StartupError` carries the setting (or flag) to change; `error_line` turns it and the
other expected failures (a bad setting value, an unreachable database, a missing
embedder) into `haki-context: error: <what> (<setting>)`. The checks here run before
anything slow starts, so that a wrong setting fails in a second, not after the
database has started. This module imports nothing heavy: the embedded database
module and the CLI both use it.
"""

from __future__ import annotations

import errno
import os
import re
import socket
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from .db.hosts import hosts_of
from .settings import is_loopback

if TYPE_CHECKING:
    from pydantic import ValidationError

PREFIX = "haki-context: error: "

DATABASE_URL = "HAKI_DATABASE_URL"
REPLICA_URLS = "HAKI_REPLICA_URLS"
DATA_DIR = "HAKI_DATA_DIR"
MODEL_CACHE_DIR = "HAKI_MODEL_CACHE_DIR"
EMBED_PROVIDER = "HAKI_EMBED_PROVIDER"
PORT = "--port or HAKI_PORT"
HOST = "--host or HAKI_HOST"

# Settings whose values are never echoed back (they may hold credentials).
_SECRET_FIELD = re.compile(r"url|password|secret|token|key", re.IGNORECASE)


class StartupError(Exception):
    """An operator error: `what` went wrong, `setting` is the setting or flag to change;
    `exit_code` is the command's status (2: a usage error, as argparse's)."""

    def __init__(self, what: str, setting: str, *, exit_code: int = 1) -> None:
        super().__init__(f"{what} ({setting})")
        self.what = what
        self.setting = setting
        self.exit_code = exit_code


def error_line(
    exc: BaseException, *, database_setting: str = DATA_DIR, flags: Mapping[str, str] | None = None
) -> str | None:
    """The one line that reports `exc`, or None for an exception that is not an operator error
    (a bug: the caller reports it as unexpected). `database_setting` names the setting behind
    the database in use (HAKI_DATABASE_URL or HAKI_DATA_DIR), for errors the database raises.
    `flags`: the settings given on the command line, by field (`port` -> `--port`), so that a
    bad value of one names the flag that gave it, not the variable."""
    import asyncpg
    from pydantic import ValidationError
    from pydantic_settings import SettingsError

    if isinstance(exc, StartupError):
        return PREFIX + str(exc)
    if isinstance(exc, ValidationError):
        return PREFIX + _validation_what(exc, flags or {})
    if isinstance(exc, SettingsError):
        found = re.search(r'field "([^"]+)"', str(exc))
        name = f"HAKI_{found.group(1).upper()}" if found else "HAKI_*"
        return PREFIX + f"cannot read the setting {name}: {_first_line(str(exc))} ({name})"
    name = type(exc).__name__
    if (
        name == "EmbedderUnavailable"
    ):  # core.embedding.embedder's, matched by name: importing it loads the embedder's stack
        return PREFIX + f"the embedder cannot load: {_flat(str(exc))} ({EMBED_PROVIDER} or {MODEL_CACHE_DIR})"
    if name == "TokenizerUnavailable":  # core.context.token_counts': the encoding's file is not OpenAI's
        return PREFIX + f"{_flat(str(exc))} (HAKI_TOKENIZER)"
    if name == "EmbedderMismatch":
        return PREFIX + f"{_flat(str(exc))} ({EMBED_PROVIDER})"
    if name == "ReembedBlocked":  # core.space's: the command gave way to writes too long; it can run again
        return PREFIX + _flat(str(exc))
    if isinstance(exc, asyncpg.PostgresError | asyncpg.InterfaceError):
        return PREFIX + f"the database refused: {_first_line(str(exc))} ({database_setting})"
    if isinstance(exc, subprocess.CalledProcessError | subprocess.TimeoutExpired):
        command = Path(str(exc.cmd[0] if isinstance(exc.cmd, list | tuple) else exc.cmd)).name
        return PREFIX + f"{command} failed: {_first_line(str(exc))} ({database_setting})"
    if isinstance(exc, OSError):
        where = f" {exc.filename}" if exc.filename else ""
        return PREFIX + f"{_os_reason(exc)}{where} ({database_setting})"
    return None


def _validation_what(exc: ValidationError, flags: Mapping[str, str]) -> str:
    """`invalid setting HAKI_PORT='abc': input should be ... (HAKI_PORT)` for each bad value,
    `invalid flag --port=99999: ... (--port)` for a value a flag gave."""
    parts: list[str] = []
    names: list[str] = []
    for err in exc.errors():
        field = str(err["loc"][0]) if err.get("loc") else ""
        if field in flags:
            kind, name = "flag", flags[field]
        else:
            kind, name = "setting", (f"HAKI_{field.upper()}" if field else "HAKI_*")
        shown = "" if _SECRET_FIELD.search(field) else f"={_short(err.get('input'))}"
        message = str(err.get("msg", "not valid"))
        parts.append(f"invalid {kind} {name}{shown}: {message[:1].lower()}{message[1:]}")
        names.append(name)
    return "; ".join(parts) + f" ({', '.join(dict.fromkeys(names))})"


def _short(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _flat(text: str) -> str:
    return " ".join(text.split())


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0].strip() if lines else ""


def _os_reason(exc: OSError) -> str:
    if isinstance(exc, socket.gaierror):
        return "unknown host"
    if exc.errno == errno.ECONNREFUSED:
        return "connection refused"
    if exc.errno:
        return os.strerror(exc.errno).lower()
    return _first_line(str(exc)) or type(exc).__name__


# --- the database URL


def database_target(url: str, *, setting: str = DATABASE_URL) -> str:
    """`host:port` (or a socket directory) of a PostgreSQL URL, each host of a multi-host URL
    (`postgresql://h1:p1,h2:p2/db`, or libpq's `?host=h1,h2&port=p1,p2`) comma-separated;
    StartupError when it is not one.

    The URL's password never appears in the result nor in the error, which names `setting`."""
    try:
        hosts = hosts_of(url)
        scheme = urlsplit(url.strip()).scheme
    except ValueError as exc:
        raise StartupError(f"the database URL does not parse: {_redacted(str(exc), url)}", setting) from exc
    if scheme not in ("postgresql", "postgres"):
        got = f"got scheme {scheme!r}" if scheme else "got no scheme"
        raise StartupError(
            f"the database URL is not a PostgreSQL URL: expected postgresql://user:password@host:port/database, {got}",
            setting,
        )
    return ",".join(host.target() for host in hosts)


async def check_database(url: str, timeout_s: float = 10.0) -> None:
    """Connect once to the PostgreSQL at `url`; StartupError naming host:port when that fails."""
    import asyncpg

    target = database_target(url)
    try:
        conn = await asyncpg.connect(url, timeout=timeout_s)
    except TimeoutError as exc:
        raise StartupError(f"cannot connect to the PostgreSQL at {target}: timed out", DATABASE_URL) from exc
    except OSError as exc:
        raise StartupError(f"cannot connect to the PostgreSQL at {target}: {_os_reason(exc)}", DATABASE_URL) from exc
    except (asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        reason = _redacted(_first_line(str(exc)), url)
        raise StartupError(f"the PostgreSQL at {target} refused the connection: {reason}", DATABASE_URL) from exc
    except ValueError as exc:  # asyncpg's DSN parser (an unknown sslmode, a bad port)
        raise StartupError(f"the database URL does not parse: {_redacted(str(exc), url)}", DATABASE_URL) from exc
    await conn.close()


# Connections a server process holds beside its pool: the live-trace listener, and one check
# at a time (/readyz, /metrics, the supervisor); the parent of several workers holds one check.
CONNECTIONS_BESIDE_POOL = 2
WORKERS = "HAKI_WORKERS or HAKI_POOL_MAX_SIZE"


def connections_needed(*, workers: int, pool_max_size: int) -> int:
    """The most connections `workers` server processes may open on one database together."""
    parent = 1 if workers > 1 else 0
    return workers * (pool_max_size + CONNECTIONS_BESIDE_POOL) + parent


async def check_connection_budget(url: str, *, workers: int, pool_max_size: int, what: str = "the database") -> None:
    """StartupError when `workers` processes with pools of `pool_max_size` could open more
    connections than the server at `url` allows clients (its max_connections less the reserved)."""
    import asyncpg

    from .db.health import connection_limit

    conn = await asyncpg.connect(url, timeout=10.0)
    try:
        most, reserved = await connection_limit(conn)
    finally:
        await conn.close()
    needed = connections_needed(workers=workers, pool_max_size=pool_max_size)
    if needed > most - reserved:
        raise StartupError(
            f"{workers} worker(s) with pools of {pool_max_size} may open {needed} connections, more than"
            f" {what} at {database_target(url)} allows ({most - reserved}: max_connections {most} less {reserved}"
            " reserved); lower them, or raise its max_connections",
            WORKERS,
        )


def _redacted(text: str, url: str) -> str:
    try:
        password = urlsplit(url).password
    except ValueError:
        password = None
    return text.replace(password, "***") if password else text


# --- directories and the port


def check_writable_dir(path: Path, setting: str, what: str) -> Path:
    """`path`, resolved, if it is a directory this process can write to or can create;
    StartupError otherwise (a file in the way, no write permission)."""
    path = path.expanduser().resolve()
    if path.exists() and not path.is_dir():
        raise StartupError(f"{what} {path} is not a directory", setting)
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise StartupError(f"{what} {path} cannot be created: {existing} is a file", setting)
    if not os.access(existing, os.W_OK | os.X_OK):
        verb = "is not writable" if existing == path else f"cannot be created: {existing} is not writable"
        raise StartupError(f"{what} {path} {verb}", setting)
    return path


def bind_port(host: str, port: int) -> socket.socket:
    """A socket bound to (host, port), for the server to listen on; StartupError when the port is
    taken (or not ours to take). Binding here, before the database starts, fails a busy port at once
    and keeps it ours while the rest starts."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, OverflowError, UnicodeError) as exc:
        raise StartupError(f"cannot listen on {host}:{port}: {exc}", f"{HOST}, {PORT}") from exc
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OverflowError as exc:
        sock.close()
        raise StartupError(f"port {port} is out of range (0-65535)", PORT) from exc
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise StartupError(f"port {port} on {host} is already in use", PORT) from exc
        if exc.errno == errno.EACCES:
            raise StartupError(f"no permission to listen on port {port} on {host}", PORT) from exc
        raise StartupError(f"cannot listen on {host}:{port}: {_os_reason(exc)}", HOST) from exc
    sock.set_inheritable(True)
    return sock


DEV_MODE = "HAKI_DEV_MODE or HAKI_DEV_MODE_ON_ANY_INTERFACE"


def check_dev_mode_bind(host: str, *, dev_mode: bool, on_any_interface: bool) -> None:
    """Keyless development mode only on a loopback bind, unless explicitly allowed: elsewhere
    anyone who reaches the port would read and write project `default` without a key."""
    if not dev_mode or on_any_interface or is_loopback(host):
        return
    raise StartupError(
        f"keyless development mode on {host}, which is not a loopback address, would let anyone who "
        "reaches the port use project `default`; turn it off and use keys, or allow it",
        DEV_MODE,
    )
