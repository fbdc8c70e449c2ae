"""A server that takes connections but never answers (a machine frozen or cut off): passed over when
connecting to one of several hosts (db/pool.HostsInTurn), each within a timeout of its own, the next
connection beginning with the host that answered; and given up on a grace after the statement
timeout when a statement waits on it (db/pool.client_wait_s), but where the work lifts that timeout
(db/pool.without_statement_timeout). Also how a URL names its hosts (db/hosts.py)."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import asyncpg
import pytest

from haki_context.core.serving.runtime import open_pool
from haki_context.db import pool as db_pool
from haki_context.db.hosts import Host, hosts_of
from haki_context.db.pool import HostsInTurn, without_statement_timeout
from haki_context.settings import Settings


@pytest.mark.parametrize(
    ("url", "hosts"),
    [
        (
            "postgresql://u:pw@127.0.0.1:5441,127.0.0.1:5442/db?target_session_attrs=read-write",
            [Host("127.0.0.1", "5441"), Host("127.0.0.1", "5442")],
        ),
        ("postgresql://u@h1,[::1]:7/db", [Host("h1", ""), Host("::1", "7")]),
        ("postgresql://postgres:@/postgres?host=/tmp/pg&port=5432", [Host("/tmp/pg", "5432")]),
        ("postgresql:///db?host=a,b&port=1,2", [Host("a", "1"), Host("b", "2")]),
        ("postgresql://db.example:6543/db", [Host("db.example", "6543")]),
    ],
)
def test_a_url_names_its_hosts_in_order(url: str, hosts: list[Host]) -> None:
    assert hosts_of(url) == hosts


def test_a_port_that_is_no_number_does_not_parse() -> None:
    with pytest.raises(ValueError, match="not a number"):
        hosts_of("postgresql://h1:5432,h2:x/db")


@pytest.fixture
def silent_host() -> Iterator[tuple[Host, socket.socket]]:
    """A host that takes connections (the kernel completes them into the backlog) and never answers:
    a frozen machine, seen from a client."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        listener.setblocking(False)
        yield Host("127.0.0.1", str(listener.getsockname()[1])), listener


def connections_taken(listener: socket.socket) -> int:
    """How many connections reached the listener since the last count."""
    taken = 0
    while True:
        try:
            conn, _ = listener.accept()
        except BlockingIOError:
            return taken
        conn.close()
        taken += 1


async def test_a_host_that_never_answers_is_passed_over_and_the_next_connection_begins_with_the_one_that_did(
    migrated: str, silent_host: tuple[Host, socket.socket]
) -> None:
    silent, listener = silent_host
    turn = HostsInTurn([silent, *hosts_of(migrated)], timeout_s=0.5)
    first = await turn(migrated)
    try:
        assert await first.fetchval("SELECT 1") == 1
        assert connections_taken(listener) == 1  # tried, then passed over
        second = await turn(migrated)
        await second.close()
        assert connections_taken(listener) == 0  # not tried again
    finally:
        await first.close()


async def test_with_every_host_refusing_the_telling_failure_is_raised(
    migrated: str, silent_host: tuple[Host, socket.socket]
) -> None:
    silent, _ = silent_host
    [real] = hosts_of(migrated)
    turn = HostsInTurn([silent, real], timeout_s=0.5)
    with pytest.raises(asyncpg.InvalidCatalogNameError):  # the real host's answer, not the silent one's timeout
        await turn(migrated.replace("/postgres?", "/no_such_database?"))
    with pytest.raises(TimeoutError):
        await HostsInTurn([silent], timeout_s=0.2)(migrated)


async def test_a_pool_on_a_multi_host_url_serves_past_a_silent_first_host(
    migrated: str, silent_host: tuple[Host, socket.socket]
) -> None:
    silent, _ = silent_host
    [real] = hosts_of(migrated)
    # libpq's host list in the query: the session's database listens on a socket directory
    url = f"postgresql://postgres:@/postgres?host={silent.host},{real.host}&port={silent.port},{real.port}"
    pool = await open_pool(url, Settings(), min_size=1, max_size=2)
    try:
        async with pool.acquire() as conn:
            assert await conn.fetchval("SELECT 1") == 1
    finally:
        await pool.close()


async def lifted_sleep(conn: asyncpg.Connection) -> None:
    """A statement the server lets run past the pool's statement timeout, as a frozen server's would."""
    async with conn.transaction():
        await conn.execute("SELECT set_config('statement_timeout', '0', true)")
        await conn.execute("SELECT pg_sleep(1.0)")


async def test_a_statement_is_given_up_on_a_grace_after_the_statement_timeout_but_where_the_work_lifts_it(
    migrated: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(db_pool, "CLIENT_WAIT_GRACE_S", 0.2)
    pool = await open_pool(migrated, Settings(statement_timeout_ms=100), min_size=1, max_size=2)
    try:
        async with pool.acquire() as conn:
            with pytest.raises(asyncpg.InterfaceError) as raised:  # the client stops waiting at 0.3 s
                await lifted_sleep(conn)
            # The connection is dropped at once (its transaction's rollback finds it closed), not
            # cancelled and waited for as long again.
            assert isinstance(raised.value.__context__, TimeoutError)
        async with pool.acquire() as conn:
            async with without_statement_timeout(conn):
                await lifted_sleep(conn)  # waited for to the end
                assert await conn.fetchval("SHOW statement_timeout") == "0"
            assert await conn.fetchval("SHOW statement_timeout") == "100ms"  # the server's limit is back
        async with pool.acquire() as conn:  # the limit is back after the block
            with pytest.raises(asyncpg.InterfaceError):
                await lifted_sleep(conn)
        async with pool.acquire() as conn:
            assert await conn.fetchval("SELECT 1") == 1
    finally:
        await pool.close()


async def test_a_silent_connection_has_its_pool_replace_the_others(
    migrated: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The others lead to the same server: reused, each would hold a call for the whole wait.
    monkeypatch.setattr(db_pool, "CLIENT_WAIT_GRACE_S", 0.2)
    pool = await open_pool(migrated, Settings(statement_timeout_ms=100), min_size=2, max_size=2)
    try:
        other = await pool.acquire()
        other_pid = await other.fetchval("SELECT pg_backend_pid()")
        async with pool.acquire() as conn:
            with pytest.raises(asyncpg.InterfaceError):
                await lifted_sleep(conn)
        await pool.release(other)
        pids = set()
        for _ in range(2):
            async with pool.acquire() as conn:
                pids.add(await conn.fetchval("SELECT pg_backend_pid()"))
        assert other_pid not in pids
    finally:
        await pool.close()


def test_without_a_statement_timeout_the_client_waits_without_limit() -> None:
    assert db_pool.client_wait_s(0) is None
    assert db_pool.client_wait_s(10_000) == 10.0 + db_pool.CLIENT_WAIT_GRACE_S
