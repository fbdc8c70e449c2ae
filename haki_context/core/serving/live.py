"""Live traces: every trace written by any process sharing the database, fanned out to this
process's subscribers (docs/dashboards.md "Live traces", docs/operations.md "Subscriptions").

One listening connection per process, whatever the number of subscribers: the trace write
notifies the channel in its own statement (db/traces.py), the listener routes each
notification by project, then by subject, to the subscribers' bounded buffers. A subscriber
whose buffer is full (it reads slower than traces arrive) is dropped: its subscription ends
with UNAVAILABLE rather than holding an ever growing backlog in the server's memory.

The listener runs while there is at least one subscriber. When its connection is lost (the
database restarted, a network cut), it connects and LISTENs again, with a growing pause
between tries; traces written meanwhile are not announced (a dashboard re-reads `traces` on
reconnect).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import asyncpg

from ...db import notify as db_notify
from ..errors import Unavailable
from .auth import Caller

log = logging.getLogger("haki_context.live")

# Seconds between checks that the listening connection still answers (a cut that closes no
# socket is otherwise noticed only by the kernel's keepalive, hours later).
PING_INTERVAL_S = 30.0
RETRY_MAX_S = 5.0


@dataclass(frozen=True)
class LiveLimits:
    """How many subscriptions one key and the whole process may hold, and each one's buffer."""

    per_key: int
    per_process: int
    buffer: int


class SubscriberDropped(Unavailable):
    """The subscriber read slower than traces arrived and its buffer filled."""


@dataclass(eq=False)
class Subscription:
    """One subscriber's buffer of announced trace ids, in the order written."""

    project_id: str
    subject_id: str | None
    key: str
    capacity: int
    pending: deque[str] = field(default_factory=deque)
    dropped: bool = False
    _wake: asyncio.Event = field(default_factory=asyncio.Event)

    def offer(self, trace_id: str) -> None:
        """Buffer an announced trace; a full buffer drops the subscriber (and frees the buffer)."""
        if self.dropped:
            return
        if len(self.pending) >= self.capacity:
            self.dropped = True
            self.pending.clear()
        else:
            self.pending.append(trace_id)
        self._wake.set()

    async def next_batch(self) -> list[str]:
        """Every trace id announced since the last batch (at least one), oldest first.

        Raises SubscriberDropped once the buffer has overflowed."""
        while not self.pending and not self.dropped:
            self._wake.clear()
            await self._wake.wait()
        if self.dropped:
            raise SubscriberDropped(
                f"this subscription fell more than {self.capacity} traces behind and was dropped "
                "(HAKI_SUBSCRIPTION_BUFFER); subscribe again, and read `traces` for what it missed"
            )
        batch = list(self.pending)
        self.pending.clear()
        return batch


class LiveTraces:
    """The process's subscriptions to new traces and the one connection that listens for them."""

    def __init__(self, dsn: str | None, limits: LiveLimits) -> None:
        self._dsn = dsn
        self.limits = limits
        self._by_project: dict[str, set[Subscription]] = {}
        self._by_key: dict[str, int] = {}
        self._count = 0
        self._listener: asyncio.Task[None] | None = None
        self.listening = asyncio.Event()  # set while the channel is LISTENed on
        self.reconnects = 0  # connections made after a lost one

    @property
    def open(self) -> int:
        """Subscriptions open in this process."""
        return self._count

    @contextlib.asynccontextmanager
    async def subscribe(self, caller: Caller, subject_id: str | None) -> AsyncIterator[Subscription]:
        """A subscription to `caller`'s project's new traces (of one subject, if given), held for
        the block. UNAVAILABLE over the key's or the process's limit, or without a database."""
        if self._dsn is None:
            raise Unavailable("live traces need the database's address, which this server was not given")
        key = caller.key_id or caller.origin.value
        if self._count >= self.limits.per_process:
            raise Unavailable(
                f"this server holds its most subscriptions ({self.limits.per_process}, "
                "HAKI_SUBSCRIPTIONS_PER_PROCESS); try again later or another server"
            )
        if self._by_key.get(key, 0) >= self.limits.per_key:
            raise Unavailable(
                f"this key holds its most subscriptions on this server ({self.limits.per_key}, "
                "HAKI_SUBSCRIPTIONS_PER_KEY); close one first"
            )
        sub = Subscription(caller.project_id, subject_id, key, self.limits.buffer)
        self._by_project.setdefault(caller.project_id, set()).add(sub)
        self._by_key[key] = self._by_key.get(key, 0) + 1
        self._count += 1
        if self._listener is None or self._listener.done():
            self._listener = asyncio.create_task(self._listen())
        try:
            yield sub
        finally:
            self._leave(sub)

    async def close(self) -> None:
        """Stop listening (the server stops): its connection is closed before the database is."""
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.cancel()
            await asyncio.gather(listener, return_exceptions=True)

    def _leave(self, sub: Subscription) -> None:
        subs = self._by_project.get(sub.project_id)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self._by_project[sub.project_id]
        left = self._by_key[sub.key] - 1
        if left:
            self._by_key[sub.key] = left
        else:
            del self._by_key[sub.key]
        self._count -= 1
        if not self._count and self._listener is not None:
            self._listener.cancel()  # no one to tell: the connection is given back
            self._listener = None

    def _on_notification(self, conn: object, pid: int, channel: str, payload: str) -> None:
        try:
            project_id, trace_id, subject_id = json.loads(payload)
        except (ValueError, TypeError):
            log.warning("ignored a trace notification that is not [project, trace, subject]: %.100r", payload)
            return
        for sub in self._by_project.get(project_id, ()):
            if sub.subject_id is None or sub.subject_id == subject_id:
                sub.offer(trace_id)

    async def _listen(self) -> None:
        """LISTEN while there are subscribers; connect again whenever the connection is lost."""
        assert self._dsn is not None
        pause, failing, lost_before = 0.1, False, False
        while True:
            try:
                conn = await db_notify.listen(self._dsn, self._on_notification)
            except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                if not failing:
                    log.warning("live traces: cannot LISTEN (%s); trying again", type(exc).__name__)
                    failing = True
                await asyncio.sleep(pause)
                pause = min(pause * 2, RETRY_MAX_S)
                continue
            if lost_before:
                self.reconnects += 1
                log.info("live traces: listening again")
            pause, failing, lost_before = 0.1, False, True
            self.listening.set()
            try:
                await self._hold(conn)
                log.warning("live traces: the listening connection was lost; connecting again")
            finally:
                if self._listener is asyncio.current_task():  # not a listener already replaced
                    self.listening.clear()
                conn.terminate()

    async def _hold(self, conn: asyncpg.Connection) -> None:
        """Return once `conn` is closed or stops answering."""
        closed = asyncio.Event()
        conn.add_termination_listener(lambda _: closed.set())
        while not conn.is_closed():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(closed.wait(), PING_INTERVAL_S)
                return
            try:
                await db_notify.ping(conn, timeout_s=5.0)
            except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError):
                return
