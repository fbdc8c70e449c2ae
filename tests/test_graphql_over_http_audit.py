"""The GraphQL-over-HTTP conformance audit of graphql-http (`serverAudits`, the version pinned in
tests/http_audit/package.json) against a live `haki-context serve`: no error and no warning.

It needs Node.js and the audit's packages (`npm ci --prefix tests/http_audit`, which .ci/run
does); without them it is skipped here and fails in CI.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

AUDIT = Path(__file__).resolve().parent / "http_audit"
CLI = str(Path(sys.executable).parent / "haki-context")


def _require_the_audit() -> None:
    """Skip (fail in CI) where the audit cannot run."""
    missing = None
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            missing = missing or f"`{tool}` is not installed (the audit runs on Node.js)"
    if missing is None and not (AUDIT / "node_modules" / "graphql-http").is_dir():
        missing = "the audit's packages are not installed: run `npm ci --prefix tests/http_audit`"
    if missing is not None:
        if os.environ.get("CI"):
            pytest.fail(f"the GraphQL-over-HTTP audit must run in CI: {missing}")
        pytest.skip(missing)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def server_url(migrated: str) -> Iterator[str]:
    """`haki-context serve` on a free loopback port: development mode, the hashing embedder,
    the test database."""
    _require_the_audit()
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HAKI_")}
    env.update(
        {
            "HAKI_DATABASE_URL": migrated,
            "HAKI_DEV_MODE": "1",
            "HAKI_EMBED_PROVIDER": "hashing",
            "HAKI_SCOPE_INDEX_INTERVAL_S": "0",
        }
    )
    proc = subprocess.Popen(
        [CLI, "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else "the server exited"
            assert time.monotonic() < deadline, "the server did not become ready"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/graphql"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


def test_the_graphql_over_http_audit_finds_no_error_and_no_warning(server_url: str) -> None:
    audit = subprocess.run(
        ["node", "audit.mjs", server_url], cwd=AUDIT, capture_output=True, text=True, timeout=120, check=False
    )
    print(audit.stdout, audit.stderr)  # the full report, shown with -s or on failure
    summary = audit.stdout.strip().splitlines()[-1] if audit.stdout.strip() else audit.stderr
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert summary.endswith(" 0 warn, 0 error"), summary
