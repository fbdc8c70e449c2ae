"""Resolver of `statsSeries`."""

from __future__ import annotations

from datetime import datetime

from ..core.history import traces
from .context import RequestContext


async def stats_series(
    ctx: RequestContext, since: datetime, until: datetime | None, bucket: traces.StatsBucket
) -> list[traces.StatsBucketRow]:
    """The caller's project's usage figures over [since, until) in buckets."""
    return await traces.stats_series(ctx.rt, ctx.project_id, since, until, bucket)
