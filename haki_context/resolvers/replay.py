"""Resolvers of `replay` and of a trace's settings record."""

from __future__ import annotations

from ..core.context import settings_records
from ..core.context.settings_records import SettingsRecord
from ..core.history import replay as core_replay
from .context import PendingTrace, RequestContext


async def replay(
    ctx: RequestContext,
    trace_id: str,
    *,
    overrides: core_replay.ReplayOverrides | None,
    persist: bool,
    compare_with_now: bool,
    path: tuple[str | int, ...],
) -> core_replay.Replay:
    """A stored call run again, in an admission slot as `context` is; a persisted replay's
    trace write is awaited before the response, as `context`'s is (schema.writes)."""
    async with ctx.rt.admission.slot():
        result = await core_replay.replay(
            ctx.rt, ctx.project_id, trace_id, overrides, persist=persist, compare_with_now=compare_with_now
        )
    if persist:
        packet = result.assembly.packet
        ctx.trace_writes[packet.trace.id] = PendingTrace(path, result.assembly.write)
        ctx.loaders.decisions.prime(packet.trace.id, list(packet.trace.decisions or ()))
    return result


async def settings_record(ctx: RequestContext, record_id: str | None) -> SettingsRecord | None:
    """A trace's settings record; None for a trace made before records were kept."""
    if record_id is None:
        return None
    return await settings_records.by_id(ctx.rt, ctx.project_id, record_id)
