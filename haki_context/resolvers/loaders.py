"""Per-request DataLoaders: every by-id lookup of a request is batched into one query."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from strawberry.dataloader import DataLoader

from ..core.history import traces
from ..core.memory import loading
from ..core.models import ConflictSet, Event, Fact
from ..core.packet import TraceDecision
from ..core.serving.runtime import Runtime


@dataclass(frozen=True)
class Loaders:
    """Built anew for each request, so nothing is cached across requests or projects."""

    events: DataLoader[str, Event | None]
    facts: DataLoader[str, Fact | None]
    conflicts: DataLoader[str, ConflictSet | None]
    decisions: DataLoader[str, list[TraceDecision]]


def build_loaders(rt: Runtime, project_id: str) -> Loaders:
    async def load_events(ids: list[str]) -> Sequence[Event | None]:
        return await loading.events_by_id(rt, project_id, ids)

    async def load_facts(ids: list[str]) -> Sequence[Fact | None]:
        return await loading.facts_by_id(rt, project_id, ids)

    async def load_conflicts(ids: list[str]) -> Sequence[ConflictSet | None]:
        return await loading.conflicts_by_id(rt, project_id, ids)

    async def load_decisions(ids: list[str]) -> Sequence[list[TraceDecision]]:
        return await traces.decisions_by_trace(rt, project_id, ids)

    return Loaders(
        events=DataLoader(load_fn=load_events, max_batch_size=1000),
        facts=DataLoader(load_fn=load_facts, max_batch_size=1000),
        conflicts=DataLoader(load_fn=load_conflicts, max_batch_size=1000),
        decisions=DataLoader(load_fn=load_decisions, max_batch_size=100),
    )
