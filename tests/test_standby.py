"""A hot standby of the embedded PostgreSQL (db/standby.py, `haki-context replica`), kept current
by PostgreSQL's own streaming replication: what the primary writes is read back from it, it
refuses writes, and its replay can be paused and resumed."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from haki_context.cli import main
from haki_context.db import embedded, standby

DIM = 384
TABLE = "standby_probe"


def _vector(seed: int) -> str:
    return "[" + ",".join(str((seed + i) % 7 / 8) for i in range(DIM)) + "]"


async def _eventually(check: Callable[[], Awaitable[Any]], what: str, timeout_s: float = 10.0) -> Any:
    """The first truthy result of `check`, polled until `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = await check()
        if result:
            return result
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s:g} s"
        await asyncio.sleep(0.05)


@pytest.fixture(scope="module")
async def primary(migrated: str, standby_uri: str) -> AsyncIterator[asyncpg.Connection]:
    """A connection to the primary, with a table of this module's holding a pgvector column,
    which the standby has replayed."""
    conn = await asyncpg.connect(migrated)
    await conn.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (id text PRIMARY KEY, embedding vector({DIM}) NOT NULL)")
    replica = await asyncpg.connect(standby_uri)
    try:
        await _eventually(lambda: replica.fetchval("SELECT to_regclass($1) IS NOT NULL", TABLE), "the table replayed")
    finally:
        await replica.close()
    yield conn
    await conn.close()


@pytest.fixture
async def replica(standby_uri: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(standby_uri)
    yield conn
    await conn.close()


async def _insert(primary: asyncpg.Connection, seed: int) -> str:
    row_id = uuid.uuid4().hex
    await primary.execute(f"INSERT INTO {TABLE} VALUES ($1, $2::vector)", row_id, _vector(seed))
    return row_id


async def test_a_vector_row_written_on_the_primary_is_read_back_from_the_standby(
    primary: asyncpg.Connection, replica: asyncpg.Connection
) -> None:
    row_id = await _insert(primary, 3)

    async def read() -> asyncpg.Record | None:
        return await replica.fetchrow(
            f"SELECT embedding = $2::vector AS same, vector_dims(embedding) AS dims FROM {TABLE} WHERE id = $1",
            row_id,
            _vector(3),
        )

    row = await _eventually(read, "the row on the standby")
    assert row["same"] and row["dims"] == DIM
    assert await replica.fetchval("SELECT pg_is_in_recovery()") is True
    # Streamed by a WAL sender of the primary's, not copied by any other means.
    states = await primary.fetch("SELECT state FROM pg_stat_replication")
    assert "streaming" in [r["state"] for r in states]


async def test_the_standby_refuses_a_write(replica: asyncpg.Connection) -> None:
    with pytest.raises(asyncpg.ReadOnlySQLTransactionError):
        await replica.execute(f"INSERT INTO {TABLE} VALUES ($1, $2::vector)", uuid.uuid4().hex, _vector(1))


async def test_paused_replay_holds_a_new_primary_row_back_until_resumed(
    primary: asyncpg.Connection, replica: asyncpg.Connection
) -> None:
    present = f"SELECT EXISTS (SELECT 1 FROM {TABLE} WHERE id = $1)"
    await replica.execute("SELECT pg_wal_replay_pause()")
    try:
        row_id = await _insert(primary, 5)
        written = await primary.fetchval("SELECT pg_current_wal_lsn()")
        # Once the standby has received the WAL of the insert, only the pause keeps it from the table.
        await _eventually(
            lambda: replica.fetchval("SELECT pg_last_wal_receive_lsn() >= $1::pg_lsn", written), "the WAL received"
        )
        assert await replica.fetchval("SELECT pg_get_wal_replay_pause_state()") == "paused"
        assert await replica.fetchval(present, row_id) is False
    finally:
        await replica.execute("SELECT pg_wal_replay_resume()")
    assert await _eventually(lambda: replica.fetchval(present, row_id), "the row after the resume")


# --- the command line


@contextlib.contextmanager
def _fresh_dir() -> Iterator[Path]:
    """A new directory under /tmp (not pytest's tmp_path, which a concurrent run may prune)."""
    path = Path(tempfile.mkdtemp(prefix="haki-replica-test-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def cli_env(pg_server: embedded.EmbeddedPostgres, monkeypatch: pytest.MonkeyPatch) -> Path:
    """HAKI_DATA_DIR of the session's embedded server, and no other HAKI_* setting; returns it."""
    for name in [n for n in os.environ if n.startswith("HAKI_")]:
        monkeypatch.delenv(name)
    data_dir = pg_server.pgdata.parent
    monkeypatch.setenv("HAKI_DATA_DIR", str(data_dir))
    return data_dir


async def test_replica_create_start_and_stop_run_a_standby_of_the_embedded_database(
    cli_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with _fresh_dir() as data_dir:
        try:
            assert await asyncio.to_thread(main, ["replica", "create", "--data-dir", str(data_dir)]) == 0
            uri = standby.load(data_dir).uri
            running = f"standby running in {data_dir}; add it to the server: HAKI_REPLICA_URLS={uri}"
            assert capsys.readouterr().out.splitlines() == [running]
            conn = await asyncpg.connect(uri)
            try:
                assert await conn.fetchval("SELECT pg_is_in_recovery()") is True
            finally:
                await conn.close()

            assert await asyncio.to_thread(main, ["replica", "stop", "--data-dir", str(data_dir)]) == 0
            assert capsys.readouterr().out.splitlines() == [f"standby in {data_dir} stopped"]
            assert not embedded.postmaster_alive(data_dir / "pg")

            assert await asyncio.to_thread(main, ["replica", "start", "--data-dir", str(data_dir)]) == 0
            assert capsys.readouterr().out.splitlines() == [running]
            assert embedded.postmaster_alive(data_dir / "pg")
        finally:
            with contextlib.suppress(Exception):
                standby.stop(data_dir)
        assert not embedded.postmaster_alive(data_dir / "pg")


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("haki-context: error: "), captured.err
    assert captured.out == ""
    return lines[0]


def test_replica_create_refuses_a_data_dir_that_holds_a_cluster(
    cli_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with _fresh_dir() as data_dir:
        (data_dir / "pg").mkdir()
        (data_dir / "pg" / "PG_VERSION").write_text("18\n")
        assert main(["replica", "create", "--data-dir", str(data_dir)]) == 1
        line = _one_error_line(capsys)
        assert "already holds a database cluster" in line and line.endswith("(--data-dir)")
        assert sorted(p.name for p in data_dir.iterdir()) == ["pg"]


def test_replica_create_refuses_the_primarys_own_data_dir(cli_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replica", "create", "--data-dir", str(cli_env)]) == 1
    assert "already holds a database cluster" in _one_error_line(capsys)


def test_replica_create_without_a_running_embedded_database_says_to_start_serve(
    cli_env: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with _fresh_dir() as primary_dir, _fresh_dir() as data_dir:
        monkeypatch.setenv("HAKI_DATA_DIR", str(primary_dir))
        assert main(["replica", "create", "--data-dir", str(data_dir)]) == 1
        line = _one_error_line(capsys)
        assert "start `haki-context serve` first" in line and line.endswith("(HAKI_DATA_DIR)")
        assert list(data_dir.iterdir()) == []


def test_replica_create_refuses_an_external_database(
    cli_env: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HAKI_DATABASE_URL", "postgresql://u:p@db.example:5432/haki")
    with _fresh_dir() as data_dir:
        assert main(["replica", "create", "--data-dir", str(data_dir)]) == 1
        line = _one_error_line(capsys)
        assert "pg_basebackup" in line and line.endswith("(HAKI_DATABASE_URL)")


def test_replica_stop_without_a_standby_says_so(cli_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with _fresh_dir() as data_dir:
        assert main(["replica", "stop", "--data-dir", str(data_dir)]) == 1
        assert "holds no standby" in _one_error_line(capsys)
