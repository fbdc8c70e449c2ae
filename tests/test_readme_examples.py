"""The README's first session, run as pasted against a live server.

The blocks to run are the fenced blocks that follow a `<!-- example: curl -->` or
`<!-- example: python -->` comment in README.md (invisible once rendered). A server is
started with `haki-context serve` on a free port, on the test session's database, with the
hashing embedder and development mode on; the examples' address and subject id are
replaced by the server's and a fresh one (the session's database is shared by every test).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
EXAMPLE = re.compile(r"<!-- example: (\w+) -->\s*\n```[\w-]*\n(.*?)\n```", re.DOTALL)
ADDRESS = "127.0.0.1:8000"
# The subject of each example: the Python one is another, so that running both records each session once.
SUBJECTS = {"curl": "user-42", "python": "user-43"}


def examples() -> dict[str, str]:
    """The README's marked blocks by kind ("curl", "python"); one of each."""
    found: dict[str, str] = {}
    for kind, body in EXAMPLE.findall(README.read_text(encoding="utf-8")):
        assert kind not in found, f"two README blocks marked `example: {kind}`"
        found[kind] = body
    return found


def test_readme_marks_both_examples() -> None:
    blocks = examples()
    assert set(blocks) == {"curl", "python"}
    for kind, body in blocks.items():
        assert ADDRESS in body and SUBJECTS[kind] in body


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(migrated: str) -> Iterator[str]:
    """A `haki-context serve` process on the session's database; yields host:port."""
    port = _free_port()
    env = {
        **os.environ,
        "HAKI_DATABASE_URL": migrated,
        "HAKI_EMBED_PROVIDER": "hashing",
        "HAKI_DEV_MODE": "1",
        "HAKI_SCOPE_INDEX_INTERVAL_S": "0",
        "HAKI_GRAPHIQL": "0",
    }
    command = [sys.executable, "-m", "haki_context.cli", "serve", "--host", "127.0.0.1", "--port", str(port)]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                pytest.fail(f"the server exited ({process.returncode}): {process.stderr.read()}")  # type: ignore[union-attr]
            try:
                with urllib.request.urlopen(f"http://{address}/readyz", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("the server was not ready within 60 s")
            time.sleep(0.2)
        yield address
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _adapt(kind: str, address: str) -> tuple[str, str]:
    """The README's `kind` block for this server and a fresh subject, and that subject."""
    subject = f"readme-{uuid.uuid4().hex[:12]}"
    return examples()[kind].replace(ADDRESS, address).replace(SUBJECTS[kind], subject), subject


def _documents(output: str) -> list[dict[str, Any]]:
    """Every JSON document printed one after the other."""
    decoder = json.JSONDecoder()
    docs: list[dict[str, Any]] = []
    i = 0

    while True:
        while i < len(output) and output[i].isspace():
            i += 1
        if i >= len(output):
            return docs
        doc, i = decoder.raw_decode(output, i)
        docs.append(doc)


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_readme_curl_session(server: str) -> None:
    script, _ = _adapt("curl", server)
    done = subprocess.run(["bash", "-eu", "-o", "pipefail", "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    responses = _documents(done.stdout)
    assert len(responses) == 4, done.stdout
    for response in responses:
        assert not response.get("errors"), response
        assert response.get("data"), response
    recorded, asserted, context, trace = (r["data"] for r in responses)
    assert len(recorded["recordEvents"]) == 2
    assert asserted["assertFact"]["outcome"] == "CREATED"
    assert "French" in context["context"]["rendered"]
    assert any(f["predicate"] == "invoice_language" for f in context["context"]["facts"])
    assert trace["trace"] is not None
    decided = [d for d in trace["trace"]["decisions"] if d["itemKind"] == "FACT"]
    assert any(d["decision"] == "INCLUDED" and d["fact"]["predicate"] == "invoice_language" for d in decided)


def test_readme_python_session(server: str, tmp_path: Path) -> None:
    script, _ = _adapt("python", server)
    path = tmp_path / "session.py"
    path.write_text(script, encoding="utf-8")
    # The example imports the Python client as its README says to install it; here, from its sources.
    client_src = str(README.parent / "clients" / "python" / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [client_src, os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr + done.stdout
    assert "French" in done.stdout, done.stdout
    assert "FACT INCLUDED TOP_SCORE" in done.stdout, done.stdout
