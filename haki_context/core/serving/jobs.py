"""Background jobs that run once per interval across every server process of a database.

Each process wakes several times per interval and claims the next pass in the database
(db/jobs.py); only the one whose claim succeeds runs it. No leader process is needed, and a
process that dies holds nothing: the next claim after the interval goes to whoever asks.
"""

from __future__ import annotations

import enum
import os
import socket

import asyncpg

from ...db import jobs as db_jobs

# A process wakes this many times per interval to claim a pass: the job then runs within a
# quarter of its interval of being due, whichever process is first.
WAKES_PER_INTERVAL = 4


class Job(enum.Enum):
    """The jobs a server runs in the background."""

    TRACE_RETENTION = "trace_retention"
    SCOPE_INDEXES = "scope_indexes"


def runner() -> str:
    """Who claims: this machine and process."""
    return f"{socket.gethostname()}:{os.getpid()}"


async def claim(pool: asyncpg.Pool, job: Job, every_s: float) -> bool:
    """True when this process runs `job`'s pass now (no process ran it in the last `every_s`)."""
    async with pool.acquire() as conn:
        return await db_jobs.claim(conn, job.value, every_s=every_s, by=runner())


def wake_interval(every_s: float) -> float:
    """Seconds between a process's claims of a job run every `every_s`."""
    return max(every_s / WAKES_PER_INTERVAL, 0.05)
