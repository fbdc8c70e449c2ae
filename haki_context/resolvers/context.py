"""The per-request GraphQL context."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.runtime import Runtime
from .loaders import Loaders, build_loaders


@dataclass(frozen=True)
class RequestContext:
    """What every resolver sees: the runtime, the caller's project and fresh DataLoaders."""

    rt: Runtime
    project_id: str
    loaders: Loaders


def build_context(rt: Runtime, project_id: str) -> RequestContext:
    return RequestContext(rt=rt, project_id=project_id, loaders=build_loaders(rt, project_id))
