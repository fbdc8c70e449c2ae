"""The write of one call's trace: started by the call, awaited before its packet is served.

A `context` call's packet may be served only once its trace has committed (a packet is never
served without its trace), yet the write need not hold up the call: the pipeline starts it as
its last stage (`TraceWrite.start`) and returns; the response is serialized meanwhile and held
until it has committed (schema/writes.py awaits `committed`). This class is the write's one
owner: it starts it, observes its end, and is the one thing awaited.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ...db import traces as db_traces
from ..packet import ContextTrace
from ..serving.runtime import Runtime
from .settings_records import SettingsRecord, ensure_written


class TraceWrite:
    """One trace's write: `committed()` ends with the write's duration (ms) once its transaction
    has committed, or raises the write's error."""

    def __init__(self, future: asyncio.Future[float]) -> None:
        self._future = future
        # Observed even when no one awaits it (a request cancelled meanwhile): no "never retrieved" log.
        future.add_done_callback(lambda w: w.cancelled() or w.exception())

    @classmethod
    async def start(cls, rt: Runtime, *, project_id: str, trace: ContextTrace, record: SettingsRecord) -> TraceWrite:
        """Send the write of `trace` (and, once per project and process, of its settings record),
        and return as soon as its statement is on the wire."""
        write = cls(asyncio.ensure_future(_write(rt, project_id, trace, record)))
        await asyncio.sleep(0)  # the write runs up to its first wait: its statement is on the wire
        return write

    @classmethod
    def skipped(cls) -> TraceWrite:
        """The write of a trace that is not persisted (a replay): done at once, taking no time."""
        done: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        done.set_result(0.0)
        return cls(done)

    async def committed(self) -> float:
        """Wait until the write has committed; its duration in ms (the write's error if it failed)."""
        return await self._future

    def when_done(self, callback: Callable[[float | None], None]) -> None:
        """Call `callback` once the write has ended: with its duration in ms, or None when it
        failed or was cancelled (metrics and spans record every call's write so)."""

        def done(w: asyncio.Future[float]) -> None:
            callback(None if w.cancelled() or w.exception() is not None else w.result())

        self._future.add_done_callback(done)


async def _write(rt: Runtime, project_id: str, trace: ContextTrace, record: SettingsRecord) -> float:
    async with rt.pool.acquire() as conn:
        await ensure_written(conn, project_id, record)  # a statement once per project and process
        return await db_traces.insert(conn, project_id, trace, durable=rt.settings.durable_traces)
