"""Where a request's reads run: a healthy streaming replica, or the primary.

PostgreSQL replicates; the server only chooses. Each process keeps a pool per replica
(HAKI_REPLICA_URLS) and checks every replica every HAKI_DATABASE_CHECK_INTERVAL_S on a
connection of its own: one that does not answer, is no standby, or lags more than
HAKI_REPLICA_MAX_LAG_MS is left out until a later check finds it well. A request's reads take
one route (`ReadRoute`), chosen at its first read:

- without a token, the next healthy replica in turn, or the primary when none is;
- with a consistency token (core/serving/consistency.py), a healthy replica that has replayed
  the log past it, waiting up to HAKI_REPLICA_WAIT_MS for one to get there, else the primary.

A statement that fails because its replica went away (or, on a standby, was cancelled by the
log it replays) runs again on the primary, and the replica is marked down at once: a replica
lost under load fails no call. Writes never come here; they use the runtime's primary pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import itertools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

import asyncpg

from ...db import replication
from ...db.health import connect
from ...startup_errors import database_target

log = logging.getLogger("haki_context.replicas")

R = TypeVar("R")

Statement = Callable[[asyncpg.Connection], Awaitable[R]]
PoolOpener = Callable[[str], Awaitable[asyncpg.Pool]]

# How often a request holding a token asks a lagging replica again, at most.
_WAIT_STEP_S = 0.002


class Reads(Protocol):
    """Where core functions run their read-only statements."""

    async def run(self, statement: Statement[R]) -> R:
        """Run `statement` on a connection of this route; it must only read (it may run twice)."""
        ...

    def connection(self) -> contextlib.AbstractAsyncContextManager[asyncpg.Connection]:
        """A connection of this route held for a long read (an export's snapshot), not retried."""
        ...

    def use_primary(self) -> None:
        """Send the rest of this route's reads to the primary (a mutation reads back what it wrote)."""
        ...


class PrimaryReads:
    """Reads on the primary's pool: the route of a server without replicas."""

    __slots__ = ("_pool",)

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def run(self, statement: Statement[R]) -> R:
        async with self._pool.acquire() as conn:
            return await statement(conn)

    def connection(self) -> contextlib.AbstractAsyncContextManager[asyncpg.Connection]:
        return self._pool.acquire()  # type: ignore[no-any-return]

    def use_primary(self) -> None:
        """Its reads are the primary's already."""


class ReplicaState(enum.Enum):
    """A replica's state at its last check, as /readyz and /metrics show it."""

    HEALTHY = "healthy"
    LAGGING = "lagging"  # answers, but its replay lag is over HAKI_REPLICA_MAX_LAG_MS
    DOWN = "down"  # does not answer (or its pool cannot open)
    NOT_STANDBY = "not_standby"  # answers, but is in no recovery: a promoted or mistaken URL


class Replica:
    """One replica as this process sees it: its pool, its check connection and its last state."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.target = database_target(url)  # host:port/database, never the password
        self.pool: asyncpg.Pool | None = None
        self.state = ReplicaState.DOWN
        self.lag_ms: float | None = None
        self.replayed = 0  # the furthest replay position seen, for tokens at or before it
        self.reads = 0  # statements run here, for /metrics
        self.checked = False  # the first state is logged by the start, each later change here
        self._checker: asyncpg.Connection | None = None

    @property
    def healthy(self) -> bool:
        return self.state is ReplicaState.HEALTHY and self.pool is not None

    def saw(self, position: int | None) -> None:
        if position is not None and position > self.replayed:
            self.replayed = position

    def lost(self, exc: BaseException) -> None:
        """A statement here failed for want of the server: left out until a check finds it well."""
        if self.state is not ReplicaState.DOWN:
            log.warning("replica %s lost (%s); its reads go elsewhere", self.target, type(exc).__name__)
        self.state = ReplicaState.DOWN
        self.lag_ms = None

    async def checker(self, timeout_s: float) -> asyncpg.Connection:
        if self._checker is None or self._checker.is_closed():
            self._checker = await connect(self.url, timeout_s)
        return self._checker

    def drop_checker(self) -> None:
        if self._checker is not None:
            self._checker.terminate()
            self._checker = None


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """A replica's state for /readyz and /metrics."""

    target: str
    state: ReplicaState
    lag_ms: float | None
    reads: int


class ReplicaSet:
    """The process's replicas, their checks and the reads' routes."""

    def __init__(
        self,
        urls: tuple[str, ...],
        *,
        primary: asyncpg.Pool,
        open_pool: PoolOpener,
        max_lag_ms: float,
        wait_ms: float,
        check_interval_s: float,
    ) -> None:
        self.replicas = [Replica(url) for url in urls]
        self.primary = primary
        self._open_pool = open_pool
        self.max_lag_ms = max_lag_ms
        self.wait_s = max(wait_ms, 0.0) / 1000.0
        self.check_interval_s = max(check_interval_s, 0.05)
        self._turn = itertools.count()
        self.primary_reads = 0  # reads routed to the primary, for /metrics
        self.waits = 0  # token waits that ended on a replica
        self.wait_fallbacks = 0  # token waits that ended on the primary

    def healthy(self) -> list[Replica]:
        return [r for r in self.replicas if r.healthy]

    def views(self) -> list[ReplicaView]:
        return [ReplicaView(r.target, r.state, r.lag_ms, r.reads) for r in self.replicas]

    def route(self, token: int | None) -> ReadRoute:
        """The reads of one request; chosen at its first read (a mutation reads nothing)."""
        return ReadRoute(self, token)

    # --- checks

    async def monitor(self) -> None:
        """Check every replica forever (cancelled when the server stops)."""
        while True:
            try:
                await self.check()
            except Exception:  # a check must outlive its own failures; each replica's are its state
                log.exception("a check of the replicas failed; checking again")
            await asyncio.sleep(self.check_interval_s)

    async def check(self) -> None:
        """One check of every replica against the primary's position now."""
        try:
            async with self.primary.acquire(timeout=self.check_interval_s + 1.0) as conn:
                primary_at: int | None = await replication.wal_position(conn)
        except Exception:  # the primary down: the replicas' lag is judged by their own clocks
            primary_at = None
        await asyncio.gather(*(self._check_one(r, primary_at) for r in self.replicas))

    async def _check_one(self, replica: Replica, primary_at: int | None) -> None:
        timeout_s = max(self.check_interval_s, 1.0)
        try:
            status = await replication.replay_status(await replica.checker(timeout_s), timeout_s=timeout_s)
            if replica.pool is None:
                replica.pool = await self._open_pool(replica.url)
        except Exception as exc:
            replica.drop_checker()
            self._set(replica, ReplicaState.DOWN, None, why=type(exc).__name__)
            return
        if not status.in_recovery:
            self._set(replica, ReplicaState.NOT_STANDBY, None, why="it is in no recovery")
            return
        replica.saw(status.replay_position)
        # Caught up with the position the primary had just before: no lag, however long ago its
        # last transaction was (an idle primary writes none). Otherwise the age of the last
        # transaction replayed is how far behind its data is.
        caught_up = primary_at is not None and (status.replay_position or 0) >= primary_at
        lag = 0.0 if caught_up else (status.replay_age_ms or 0.0)
        state = ReplicaState.HEALTHY if lag <= self.max_lag_ms else ReplicaState.LAGGING
        if replica.state is ReplicaState.DOWN and replica.checked:
            # Back from down: the pool's connections to the server that went are dropped now,
            # not met one by one by the next reads.
            await replica.pool.expire_connections()
        self._set(replica, state, lag, why=f"replay lag {lag:.0f} ms")

    def _set(self, replica: Replica, state: ReplicaState, lag_ms: float | None, *, why: str) -> None:
        if replica.checked and state is not replica.state:
            level = logging.INFO if state is ReplicaState.HEALTHY else logging.WARNING
            log.log(level, "replica %s is %s (%s)", replica.target, state.value.replace("_", " "), why)
        replica.state, replica.lag_ms, replica.checked = state, lag_ms, True

    async def close(self) -> None:
        """Close every replica's pool and check connection."""
        for replica in self.replicas:
            replica.drop_checker()
            if replica.pool is not None:
                pool, replica.pool = replica.pool, None
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(pool.close(), 3.0)
                pool.terminate()

    # --- choosing

    def next_healthy(self) -> Replica | None:
        healthy = self.healthy()
        return healthy[next(self._turn) % len(healthy)] if healthy else None

    async def past(self, token: int) -> Replica | None:
        """A healthy replica that has replayed past `token`, waiting up to HAKI_REPLICA_WAIT_MS
        for one to get there; None when none does in time."""
        deadline = time.monotonic() + self.wait_s
        step = _WAIT_STEP_S
        while True:
            healthy = self.healthy()
            if not healthy:
                return None
            for replica in healthy:
                if replica.replayed >= token:
                    return replica
            for replica in healthy:
                if await self._replayed_past(replica, token):
                    return replica
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            await asyncio.sleep(min(step, left))
            step = min(step * 2, 0.02)

    async def _replayed_past(self, replica: Replica, token: int) -> bool:
        assert replica.pool is not None
        try:
            async with replica.pool.acquire(timeout=1.0) as conn:
                replica.saw(await replication.replay_position(conn, timeout_s=1.0))
        except Exception as exc:
            if replication.lost_server(exc):
                replica.lost(exc)
                return False
            raise
        return replica.replayed >= token


class ReadRoute:
    """The reads of one request: on one replica, or on the primary, chosen at the first read."""

    __slots__ = ("_chosen", "_set", "_token")

    def __init__(self, replicas: ReplicaSet, token: int | None) -> None:
        self._set = replicas
        self._token = token
        self._chosen: asyncio.Future[Replica | None] | None = None

    async def _replica(self) -> Replica | None:
        if self._chosen is None:  # the first read chooses; reads sent with it wait for the choice
            self._chosen = asyncio.ensure_future(self._choose())
        return await asyncio.shield(self._chosen)

    async def _choose(self) -> Replica | None:
        if self._token is None:
            chosen = self._set.next_healthy()
        else:
            chosen = await self._set.past(self._token)
            if chosen is None:
                self._set.wait_fallbacks += 1
            else:
                self._set.waits += 1
        return chosen

    def use_primary(self) -> None:
        """Send this request's reads to the primary: a mutation reads back what it wrote."""
        self._chosen = asyncio.get_running_loop().create_future()
        self._chosen.set_result(None)

    async def run(self, statement: Statement[R]) -> R:
        replica = await self._replica()
        if replica is not None and replica.healthy:
            assert replica.pool is not None
            try:
                async with replica.pool.acquire() as conn:
                    found = await statement(conn)
                replica.reads += 1
                return found
            except Exception as exc:
                if not replication.lost_server(exc):
                    raise
                replica.lost(exc)
                self.use_primary()  # this request's later reads too: one source for its whole answer
        self._set.primary_reads += 1
        async with self._set.primary.acquire() as conn:
            return await statement(conn)

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[asyncpg.Connection]:
        replica = await self._replica()
        pool = replica.pool if replica is not None and replica.healthy else None
        if pool is None:
            self._set.primary_reads += 1
            pool = self._set.primary
        else:
            assert replica is not None
            replica.reads += 1
        async with pool.acquire() as conn:
            yield conn
