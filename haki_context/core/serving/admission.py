"""Admission control for `context` calls: a bounded number assembled at once, a bounded queue.

Past its capacity a process sheds load (UNAVAILABLE, HTTP 503 with Retry-After) instead of
queueing without bound: a queue that only grows makes every call late, admitted ones included.

    async with rt.admission.slot():
        ...  # the CPU and database work of one call

A call takes a free slot at once when no one is waiting; otherwise it waits in line (first come,
first served) while fewer than `queue` calls wait, and is refused at once when the line is full.
A call that waits longer than `wait_s` is refused. A slot freed goes straight to the first
waiter, so a late arrival never overtakes the line.

Plain counters and futures, no asyncio.Semaphore: a Runtime outlives event loops in tests, and a
future is made on the running loop of the call that waits for it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from types import TracebackType

from ...settings import Settings
from ..errors import Unavailable

# Seconds a refused client is told to wait before it retries (the Retry-After header).
RETRY_AFTER_S = 1

OVERLOADED = "the server is overloaded; retry later"


class Admission:
    """`slots` calls at once, up to `queue` more waiting at most `wait_s` seconds each."""

    __slots__ = ("_free", "_queue", "_slot", "_wait_s", "_waiters", "slots")

    def __init__(self, slots: int, queue: int, wait_s: float) -> None:
        if slots < 1:
            raise ValueError("an admission needs at least one slot")
        self.slots = slots
        self._free = slots
        self._queue = max(queue, 0)
        self._wait_s = max(wait_s, 0.0)
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._slot = _Slot(self)

    @classmethod
    def from_settings(cls, settings: Settings) -> Admission:
        return cls(settings.max_concurrent_context, settings.admission_queue, settings.admission_wait_s)

    @property
    def in_use(self) -> int:
        """Slots held now."""
        return self.slots - self._free

    @property
    def waiting(self) -> int:
        """Calls in line for a slot now."""
        return len(self._waiters)

    def slot(self) -> _Slot:
        """`async with admission.slot():` holds one slot for the block; raises Unavailable when
        the line is full or the wait runs out. The manager holds no state: one serves every call."""
        return self._slot

    async def acquire(self) -> None:
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return
        if len(self._waiters) >= self._queue:
            raise Unavailable(OVERLOADED)
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            async with asyncio.timeout(self._wait_s):
                await waiter
        except TimeoutError:
            if waiter.done() and not waiter.cancelled():
                return  # the slot was handed over as the wait ran out: it is this call's
            self._forget(waiter)
            raise Unavailable(OVERLOADED) from None
        except BaseException:
            # Cancelled while waiting: give up the place in line, or pass on a slot handed over.
            if waiter.done() and not waiter.cancelled():
                self.release()
            else:
                self._forget(waiter)
            raise

    def release(self) -> None:
        """Hand the slot to the first live waiter, else free it."""
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._free += 1

    def _forget(self, waiter: asyncio.Future[None]) -> None:
        waiter.cancel()
        if waiter in self._waiters:  # release() may have taken it off the line already
            self._waiters.remove(waiter)


class _Slot:
    """The async context manager of `Admission.slot()`: acquire on entry, release on any exit."""

    __slots__ = ("_admission",)

    def __init__(self, admission: Admission) -> None:
        self._admission = admission

    async def __aenter__(self) -> None:
        await self._admission.acquire()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._admission.release()
