"""`haki-context mcp`: the MCP server over stdio, for a desktop agent that spawns it.

It uses the database `serve` uses (HAKI_DATABASE_URL, or the embedded server of HAKI_DATA_DIR,
which it attaches to when another process runs it, and starts otherwise) and the same rule for
keys: the project is the key's (`--key` or HAKI_API_KEY); without a key, development mode's
project `default`, and outside development mode no start at all. The key is checked at start
(a bad one ends the command with one error line) and again, as `/graphql` does, at each call,
so a revoked key stops working within the Authenticator's cache lifetime.

Standard output carries the protocol alone: the SDK's transport moves file descriptor 1 to
standard error before the runtime opens, so nothing the runtime starts (the embedded database,
the embedder's libraries) can write into the protocol stream. Logs go to standard error.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, cast

import anyio
from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server as sdk_stdio_server

from ..core.errors import Unauthenticated
from ..core.serving.auth import Authenticator
from ..core.serving.consistency import SessionToken
from ..core.serving.runtime import Runtime
from ..schema import schema_for
from ..settings import API_KEY_ENV, Settings
from ..startup_errors import StartupError
from .gateway import Gateway, Invocation
from .server import build_server

log = logging.getLogger("haki_context")

KEY_SETTING = f"--key or {API_KEY_ENV}"


@dataclass(frozen=True)
class KeyHolder:
    """The process's runtime and the key it was started with, checked again at each call."""

    rt: Runtime
    authenticator: Authenticator
    authorization: str | None
    session: SessionToken = field(default_factory=SessionToken)  # the session's writes, for its reads

    async def invocation(self) -> Invocation:
        """The key's caller now (Unauthenticated once the key is revoked)."""
        return Invocation(self.rt, await self.authenticator.caller_for(self.authorization), self.session)


def run_stdio(settings: Settings, key: str | None) -> int:
    """Serve MCP over stdin/stdout until the client closes stdin or a SIGTERM / SIGINT arrives."""
    key = key or os.environ.get(API_KEY_ENV) or None
    if key is None and not settings.effective_dev_mode:
        raise StartupError("an API key is required outside development mode", KEY_SETTING, exit_code=2)
    try:
        return asyncio.run(_serve(settings, key))
    except BaseExceptionGroup as group:  # the SDK's task groups wrap what the start raised
        raise _first_leaf(group) from None


async def _serve(settings: Settings, key: str | None) -> int:
    task = asyncio.current_task()
    assert task is not None
    _stop_on_signals(task)
    server = stdio_server(settings, key)
    stdin = await StdinLines.open(limit=settings.max_body_bytes)
    try:
        # What MCPServer.run_stdio_async does, with standard input read by the event loop where it
        # can be: a stop cancels that read, where the SDK's worker thread, blocked in read(), would
        # hold the process until the client wrote again. (The SDK's own client reaches the low-level
        # server the same way.)
        lowlevel = server._lowlevel_server
        async with sdk_stdio_server(stdin=cast(Any, stdin)) as (read_stream, write_stream):
            await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())
    except asyncio.CancelledError:
        if not task.cancelling():
            raise
    return 0


def stdio_server(settings: Settings, key: str | None) -> MCPServer[Any]:
    """The MCP server of this process: its runtime opens once the stdio transport holds the streams."""
    authorization = f"Bearer {key}" if key else None

    @contextlib.asynccontextmanager
    async def lifespan(_: MCPServer[Any]) -> AsyncIterator[KeyHolder]:
        from ..app import open_runtime  # the app's start-up steps: database, migrations, pool, embedder

        rt, stack = await open_runtime(settings)
        try:
            authenticator = Authenticator(rt, dev_mode=settings.effective_dev_mode)
            try:
                caller = await authenticator.caller_for(authorization)
            except Unauthenticated as exc:
                raise StartupError(exc.message, KEY_SETTING) from None
            log.info("serving MCP over stdio for project %r", caller.project_id)
            yield KeyHolder(rt, authenticator, authorization)
        finally:
            # A stop asked by a signal cancels the serving; the runtime still closes in full
            # (the pool, and the embedded database when this process owns it).
            with anyio.CancelScope(shield=True):
                await stack.aclose()

    async def caller_of(ctx: ServerRequestContext[Any, Any]) -> Invocation:
        holder: KeyHolder = ctx.lifespan_context
        return await holder.invocation()

    return build_server(Gateway(schema_for(settings)), caller_of, lifespan=lifespan)


class StdinLines:
    """Standard input's lines, read by the event loop: an async iterator of text lines, which the
    SDK's stdio transport accepts in place of its own reader. A line over `limit` bytes (a message
    larger than the HTTP body limit) is dropped with a warning, its bytes never held at once."""

    def __init__(self, reader: asyncio.StreamReader, limit: int) -> None:
        self._reader = reader
        self._limit = limit

    @classmethod
    async def open(cls, *, limit: int) -> StdinLines | None:
        """Standard input as lines, or None when it is no pipe (a file, say): the SDK reads it then."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=limit)
        try:
            await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        except (ValueError, OSError):
            return None
        return cls(reader, limit)

    def __aiter__(self) -> StdinLines:
        return self

    async def __anext__(self) -> str:
        while True:
            try:
                line = await self._reader.readuntil(b"\n")
            except asyncio.IncompleteReadError as exc:  # the end of input, maybe after a last line
                if not exc.partial:
                    raise StopAsyncIteration from None
                line = exc.partial
            except asyncio.LimitOverrunError:
                await self._drop_line()
                continue
            return line.decode("utf-8", errors="replace")

    async def _drop_line(self) -> None:
        log.warning("dropped a message of more than %d bytes (HAKI_MAX_BODY_BYTES)", self._limit)
        while True:
            try:
                await self._reader.readuntil(b"\n")
                return
            except asyncio.LimitOverrunError as exc:
                await self._reader.readexactly(exc.consumed)
            except asyncio.IncompleteReadError:
                return


def _stop_on_signals(task: asyncio.Task[int]) -> None:
    """The first SIGTERM or SIGINT cancels the serving (a clean stop); later ones are ignored, so
    that the stop, bounded already, is never cut short."""
    loop = asyncio.get_running_loop()
    stopping = False

    def stop() -> None:
        nonlocal stopping
        if not stopping:
            stopping = True
            log.info("stopping the MCP server (signal)")
            task.cancel()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)


def _first_leaf(group: BaseExceptionGroup[Any]) -> BaseException:
    """The error that ended the start: the first leaf that is not a cancellation it caused."""
    leaves: list[BaseException] = []
    pending: list[BaseException] = [group]
    while pending:
        exc = pending.pop(0)
        if isinstance(exc, BaseExceptionGroup):
            pending[:0] = exc.exceptions
        else:
            leaves.append(exc)
    return next((e for e in leaves if not isinstance(e, asyncio.CancelledError)), leaves[0])
