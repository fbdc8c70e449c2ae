"""The per-request GraphQL context."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from ..core.runtime import Runtime
from .loaders import Loaders, build_loaders


@dataclass(frozen=True)
class TraceWrite:
    """A trace this request's `context` field started writing, and where that field answers."""

    path: tuple[str | int, ...]
    written: asyncio.Future[float]


@dataclass(frozen=True)
class RequestContext:
    """What every resolver sees: the runtime, the caller's project and fresh DataLoaders."""

    rt: Runtime
    project_id: str
    loaders: Loaders
    # By trace id: writes the response waits for (schema.writes.AwaitTraceWrites).
    trace_writes: dict[str, TraceWrite] = field(default_factory=dict)


def build_context(rt: Runtime, project_id: str) -> RequestContext:
    return RequestContext(rt=rt, project_id=project_id, loaders=build_loaders(rt, project_id))
