"""Resolver of the `traceAdded` subscription, and the context of a GraphQL WebSocket."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

from ..core.errors import BadRequest
from ..core.history.traces import traces_by_id
from ..core.limits import check_subject_id
from ..core.packet import ContextTrace
from ..core.serving.auth import Caller
from ..core.serving.live import LiveTraces
from ..core.serving.runtime import Runtime
from .context import RequestContext
from .loaders import build_loaders


@dataclass(frozen=True)
class SocketContext(RequestContext):
    """A WebSocket's context: a request's, for as long as the socket lives, and the process's
    live traces. Built once the socket's key is checked (at connection_init)."""

    live: LiveTraces | None = None

    def fresh_loaders(self) -> None:
        """Forget what the loaders hold: an event is answered with what the database holds now,
        and a socket open for days keeps no cache of every trace it was sent."""
        for loader in (self.loaders.events, self.loaders.facts, self.loaders.conflicts, self.loaders.decisions):
            loader.clear_all()


def socket_context(rt: Runtime, caller: Caller, live: LiveTraces) -> SocketContext:
    """The context of a socket whose caller is known."""
    return SocketContext(rt=rt, caller=caller, loaders=build_loaders(rt, caller.project_id), live=live)


def trace_added(ctx: RequestContext, subject_id: str | None) -> AsyncIterator[ContextTrace]:
    """Each trace of the caller's project (of one subject, if given) as it is written, by any
    process sharing the database; read from the database like `trace(id)`.

    The checks run here, when the field is resolved, so that a subscription sent where none is
    served (an HTTP POST) is refused with its code rather than answered with null."""
    if subject_id is not None:
        check_subject_id(subject_id)
    if not isinstance(ctx, SocketContext) or ctx.live is None:
        raise BadRequest("subscriptions are served over WebSocket (graphql-transport-ws) at /graphql")
    return _feed(ctx, ctx.live, subject_id)


async def _feed(ctx: SocketContext, live: LiveTraces, subject_id: str | None) -> AsyncIterator[ContextTrace]:
    async with live.subscribe(ctx.caller, subject_id) as subscription:
        while True:
            ids = await subscription.next_batch()
            ctx.fresh_loaders()
            for trace in await traces_by_id(ctx.rt, ctx.project_id, ids):
                if trace is not None:  # None: deleted since (a forgotten subject, retention)
                    yield trace
