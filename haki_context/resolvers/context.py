"""The per-request GraphQL context."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core.context.trace_write import TraceWrite
from ..core.serving.auth import Caller, Scope
from ..core.serving.runtime import Runtime
from .loaders import Loaders, build_loaders


@dataclass(frozen=True)
class PendingTrace:
    """A trace this request's `context` field started writing, and where that field answers."""

    path: tuple[str | int, ...]
    write: TraceWrite


@dataclass(frozen=True)
class RequestContext:
    """What every resolver sees: the runtime, the caller (project, key, scopes) and fresh DataLoaders."""

    rt: Runtime
    caller: Caller
    loaders: Loaders
    # By trace id: writes the response waits for (schema.writes.AwaitTraceWrites).
    trace_writes: dict[str, PendingTrace] = field(default_factory=dict)

    @property
    def project_id(self) -> str:
        """The caller's project: every read and write of the request stays in it."""
        return self.caller.project_id

    def require(self, scope: Scope) -> None:
        """Raise FORBIDDEN unless the caller's key holds `scope`."""
        self.caller.require(scope)


def build_context(rt: Runtime, caller: Caller, *, token: int | None = None) -> RequestContext:
    """A request's context: its reads routed to the replicas when the server has them (past
    `token`, the consistency token the request sent, when given)."""
    routed = rt.routed(token)
    return RequestContext(rt=routed, caller=caller, loaders=build_loaders(routed, caller.project_id))
