"""The asyncpg pool: codecs for vector and jsonb, and per-connection settings."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import asyncpg
import orjson
from pgvector.asyncpg import register_vector

from .hosts import Host, hosts_of

# Connecting (a database that is down is answered fast, never waited on); with several hosts,
# to each: a node on the network answers within milliseconds, one that has not by then is passed
# over for the next.
CONNECT_TIMEOUT_S = 5.0
HOST_CONNECT_TIMEOUT_S = 2.0

# The client waits for a statement this long past the statement timeout, which the server applies
# itself: only a server that stopped answering (a machine frozen or cut off, whose kernel may still
# keep the connection open) reaches it. The statement then fails as the database unavailable, and
# the connection is closed rather than used again.
CLIENT_WAIT_GRACE_S = 5.0


def client_wait_s(statement_timeout_ms: int) -> float | None:
    """How long the client waits for a statement's answer: None when statements have no timeout."""
    return statement_timeout_ms / 1000 + CLIENT_WAIT_GRACE_S if statement_timeout_ms > 0 else None


class ServerConnection(asyncpg.Connection):  # type: ignore[misc]  # asyncpg ships no types
    """asyncpg's connection, dropped when a statement outwaits the client: asyncpg would send a
    cancel request first and wait for it as long again (the caller, and a transaction's rollback,
    waiting with it), but a server that stopped answering answers no cancel either. Its pool's
    other connections are replaced then too (`silenced`): idle ones lead to the same server, and
    each would hold a call for the client's whole wait before it was dropped in turn."""

    silenced: Callable[[], None] | None = None  # set by create_pool's init

    async def execute(self, *args: Any, **kwargs: Any) -> Any:
        with self._dropped_when_silent():
            return await super().execute(*args, **kwargs)

    async def executemany(self, *args: Any, **kwargs: Any) -> Any:
        # Cancelled while it waits to send more rows, asyncpg's executemany swallows the
        # cancellation and waits for an answer the server, left half way through the batch without
        # its Sync, never sends (asyncpg 0.32, bind_execute_many): the call would hang until the
        # client's wait ran out. Cancelled, the connection is dropped at once (the server rolls its
        # transaction back) and the cancellation goes on.
        with self._dropped_when_silent():
            sending = asyncio.ensure_future(super().executemany(*args, **kwargs))
            try:
                return await asyncio.shield(sending)
            except asyncio.CancelledError:
                self.terminate()
                sending.cancel()  # out of its wait to send more, to the closed connection's error
                with contextlib.suppress(BaseException):
                    await sending
                raise

    async def _get_statement(self, *args: Any, **kwargs: Any) -> Any:
        # asyncpg prepares a statement with Parse/Describe/Flush and sends its Sync only with its
        # execution. Cancelled in between (while the statement's types are looked up, or as the
        # prepare's answer arrives), the server keeps the statement's implicit transaction open and
        # its statement timeout armed: the timeout then fires on the idle connection and answers
        # its next statement, whoever's it is (asyncpg 0.32 sends the Sync only when cancelled
        # while it waits for the prepare's answer). The connection is dropped instead.
        try:
            return await super()._get_statement(*args, **kwargs)
        except asyncio.CancelledError:
            self.terminate()
            raise

    async def fetch(self, *args: Any, **kwargs: Any) -> Any:
        with self._dropped_when_silent():
            return await super().fetch(*args, **kwargs)

    async def fetchval(self, *args: Any, **kwargs: Any) -> Any:
        with self._dropped_when_silent():
            return await super().fetchval(*args, **kwargs)

    async def fetchrow(self, *args: Any, **kwargs: Any) -> Any:
        with self._dropped_when_silent():
            return await super().fetchrow(*args, **kwargs)

    @contextlib.contextmanager
    def _dropped_when_silent(self) -> Iterator[None]:
        try:
            yield
        except TimeoutError:
            self.terminate()
            if self.silenced is not None:
                self.silenced()
            raise


class _ReplaceAll:
    """A pool's `silenced`: every connection of the pool is replaced at its next acquire (a
    multi-host URL's new connections then pass the silent server over)."""

    def __init__(self) -> None:
        self.pool: asyncpg.Pool | None = None
        self._pending: set[asyncio.Future[None]] = set()

    def __call__(self) -> None:
        if self.pool is not None:
            expiring = asyncio.ensure_future(self.pool.expire_connections())
            self._pending.add(expiring)
            expiring.add_done_callback(self._pending.discard)


@contextlib.asynccontextmanager
async def without_statement_timeout(conn: asyncpg.Connection) -> AsyncIterator[None]:
    """Within the block, statements on `conn` run to their end: the server applies no statement
    timeout (the session's, reset after the block) and the client waits for as long as they take.
    For the work that must not be cut half way: an erasure, an import, an export's snapshot, index
    builds and drops. A connection whose reset fails is dropped, never pooled without its limit.

    asyncpg reads its command timeout from the connection's configuration at each call and offers no
    call-level "no limit", so the block swaps that configuration (a pooled connection's, behind its
    proxy) and puts it back; tests/test_silent_servers.py holds it to asyncpg's behaviour."""
    raw = getattr(conn, "_con", None) or conn  # a pool's proxy holds the connection there
    config = raw._config
    raw._config = config._replace(command_timeout=None)
    try:
        await conn.execute("SET statement_timeout = 0")
        yield
    finally:
        raw._config = config
        try:
            await conn.execute("RESET statement_timeout")
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError):
            conn.terminate()


def _jsonb_encode(value: Any) -> bytes:
    return b"\x01" + orjson.dumps(value)  # jsonb's binary format: version 1, then the JSON text


def _jsonb_decode(data: bytes) -> Any:
    return orjson.loads(data[1:])


def _json_encode(value: Any) -> bytes:
    return orjson.dumps(value)


async def init_connection(conn: asyncpg.Connection) -> None:
    """Register the codecs every query relies on (run once per new connection).

    Binary jsonb codecs also let COPY (benchmarks' bulk loads) carry JSON.
    """
    await register_vector(conn)
    await conn.set_type_codec(
        "jsonb", encoder=_jsonb_encode, decoder=_jsonb_decode, schema="pg_catalog", format="binary"
    )
    await conn.set_type_codec("json", encoder=_json_encode, decoder=orjson.loads, schema="pg_catalog", format="binary")


async def keep_session(conn: asyncpg.Connection) -> None:
    """Reset hook of the pool: nothing to undo.

    The server never changes session state (its locks are transaction-scoped,
    it sets no session variables), so the default reset statement
    (`RESET ALL; UNLISTEN *; ...`) would only add a round trip to every
    checkout. An open transaction is still rolled back by asyncpg itself.
    """


async def create_pool(
    dsn: str,
    *,
    min_size: int,
    max_size: int,
    idle_lifetime_s: float,
    statement_timeout_ms: int,
    hnsw_ef_search: int,
    hnsw_max_scan_tuples: int,
    ivf_probes: int,
) -> asyncpg.Pool:
    """A pool whose connections carry our codecs and search settings.

    `hnsw.iterative_scan = relaxed_order` makes a scope-filtered HNSW scan keep
    going until it has enough rows (without it pgvector silently returns a few of
    the rows asked for); results are re-sorted by distance in the statement. The scope's IVFFlat
    index is read `ivf_probes` lists deep, and iterates the same way.

    `idle_lifetime_s`: how long an idle connection lives, 0 for as long as the
    pool (asyncpg's own default, 300 s, closes every idle connection beyond
    `min_size`: the next call then opens one and plans its statements anew).

    `plan_cache_mode = auto` (PostgreSQL's default, said here because the
    retrieval statements are written for it): a prepared statement is planned for
    its values five times, then once for all if that plan is no costlier. The
    candidates statements are costly to plan (docs/performance.md); a large scope's own partial
    HNSW index, which a plan made once for all cannot pick from parameters, is
    named with constants in a text of that scope's own (db/retrieval.py,
    "Statement texts"). `standard_conforming_strings = on` (also the default) is
    what makes those constants' quoting complete.
    """
    hosts = hosts_of(dsn)
    replace_all = _ReplaceAll()

    async def init(conn: ServerConnection) -> None:
        conn.silenced = replace_all
        await init_connection(conn)

    pool = await asyncpg.create_pool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        init=init,
        reset=keep_session,
        connect=HostsInTurn(hosts) if len(hosts) > 1 else None,
        timeout=CONNECT_TIMEOUT_S,
        command_timeout=client_wait_s(statement_timeout_ms),
        connection_class=ServerConnection,
        max_inactive_connection_lifetime=idle_lifetime_s,
        server_settings={
            "application_name": "haki-context",
            "statement_timeout": str(statement_timeout_ms),
            "hnsw.iterative_scan": "relaxed_order",
            "hnsw.ef_search": str(hnsw_ef_search),
            "hnsw.max_scan_tuples": str(hnsw_max_scan_tuples),
            "ivfflat.probes": str(ivf_probes),
            "ivfflat.iterative_scan": "relaxed_order",
            "jit": "off",
            "plan_cache_mode": "auto",
            "standard_conforming_strings": "on",
        },
    )
    assert pool is not None
    replace_all.pool = pool
    return pool


# A pool's URL naming several hosts (a Patroni cluster's nodes): asyncpg tries them in order
# within one timeout for the whole list, so a host that takes connections but never answers (a
# machine frozen, or cut off mid-handshake) would spend it all and hide the nodes after it.
class HostsInTurn:
    """asyncpg's `connect` for a pool whose URL names several hosts: each is tried with a timeout
    of its own (`timeout_s`), beginning with the one that last gave a connection; the URL's other
    parameters (`target_session_attrs` among them) apply to each. All failing, the first failure
    that is not a timeout or a refused connection is raised (a wrong password says more than the
    hosts after it), else the last."""

    def __init__(self, hosts: list[Host], *, timeout_s: float = HOST_CONNECT_TIMEOUT_S) -> None:
        self.hosts = hosts
        self.timeout_s = timeout_s
        self.first = 0  # the index of the host that last gave a connection

    async def __call__(self, dsn: str, **kwargs: Any) -> asyncpg.Connection:
        kwargs.pop("loop", None)
        kwargs["timeout"] = self.timeout_s
        failures: list[BaseException] = []
        for k in range(len(self.hosts)):
            index = (self.first + k) % len(self.hosts)
            host = self.hosts[index]
            try:
                conn = await asyncpg.connect(dsn, host=host.host, port=int(host.port or 5432), **kwargs)
            except _CONNECT_FAILURES as exc:
                failures.append(exc)
                continue
            self.first = index
            return conn
        raise next((f for f in failures if not isinstance(f, OSError | TimeoutError)), failures[-1])


# What connecting to one host may fail with; InternalClientError: not the session asked for
# (asyncpg's TargetServerAttributeNotMatched, a standby where read-write is asked).
_CONNECT_FAILURES = (
    OSError,
    TimeoutError,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.InternalClientError,
)
