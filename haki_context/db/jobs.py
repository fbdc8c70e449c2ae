"""Claims of background passes (`background_job_runs`): one process per interval wins."""

from __future__ import annotations

import asyncpg

# The row is taken when its last run is at least `every` old; two processes claiming at once
# are ordered by the row's lock, and the second sees the first's run and claims nothing.
_CLAIM = """
INSERT INTO background_job_runs (job, ran_at, ran_by) VALUES ($1, clock_timestamp(), $3)
ON CONFLICT (job) DO UPDATE SET ran_at = EXCLUDED.ran_at, ran_by = EXCLUDED.ran_by
WHERE background_job_runs.ran_at <= EXCLUDED.ran_at - make_interval(secs => $2)
RETURNING true
"""


async def claim(conn: asyncpg.Connection, job: str, *, every_s: float, by: str) -> bool:
    """True when this caller may run `job` now: no one ran it in the last `every_s` seconds."""
    return bool(await conn.fetchval(_CLAIM, job, every_s, by))


async def last_runs(conn: asyncpg.Connection) -> list[asyncpg.Record]:
    """Every job's last run (job, ran_at, ran_by), for operators and tests."""
    return list(await conn.fetch("SELECT job, ran_at, ran_by FROM background_job_runs ORDER BY job"))
