"""Positions in the primary's write-ahead log, and how far a streaming standby has replayed it.

Positions are PostgreSQL's `pg_lsn` read as a number of bytes from the log's start: compared
as integers here, written as PostgreSQL writes them (`0/16B3748`) in consistency tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

# A pg_lsn minus the log's start is a numeric count of bytes, read as a bigint.
_WAL_POSITION = "SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint"
_REPLAY_POSITION = "SELECT (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::bigint"
# The age of the last transaction the standby replayed, by its own clock (the commit's time is
# the primary's: a skew between the two machines' clocks adds to it).
_REPLAY_STATUS = """
SELECT pg_is_in_recovery() AS in_recovery,
       (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::bigint AS replay_position,
       (extract(epoch FROM clock_timestamp() - pg_last_xact_replay_timestamp()) * 1000)::float8 AS replay_age_ms
"""


@dataclass(frozen=True, slots=True)
class ReplayStatus:
    """A standby's state as it reports it: None positions on a server that is no standby."""

    in_recovery: bool
    replay_position: int | None
    replay_age_ms: float | None


async def wal_position(conn: asyncpg.Connection) -> int:
    """The primary's current write position: every transaction committed before this call
    ends at or before it."""
    return int(await conn.fetchval(_WAL_POSITION))


async def replay_position(conn: asyncpg.Connection, *, timeout_s: float) -> int | None:
    """How far the standby on `conn` has replayed the log; None on a server in no recovery."""
    found = await conn.fetchval(_REPLAY_POSITION, timeout=timeout_s)
    return None if found is None else int(found)


async def replay_status(conn: asyncpg.Connection, *, timeout_s: float) -> ReplayStatus:
    """Whether the server on `conn` is a standby, how far it has replayed and how old that is."""
    row = await conn.fetchrow(_REPLAY_STATUS, timeout=timeout_s)
    assert row is not None
    position, age = row["replay_position"], row["replay_age_ms"]
    return ReplayStatus(
        in_recovery=bool(row["in_recovery"]),
        replay_position=None if position is None else int(position),
        replay_age_ms=None if age is None else max(0.0, float(age)),
    )


# SQLSTATE classes of a server gone or going (08: connection exception; 57P: operator
# intervention, as a stop or a crash ends sessions) and 40001 with a standby's recovery conflict.
_LOST_STATES = ("08", "57P")
RECOVERY_CONFLICT_STATE = "40001"


def lost_server(exc: BaseException) -> bool:
    """True when `exc` says the server of a connection is gone, unreachable, shutting down, or
    (on a standby) cancelled a statement that conflicted with the log it replays: the statement
    may run again elsewhere. asyncpg's InternalClientError ("another operation is in
    progress") is a connection a dying server left mid-operation: the same."""
    if isinstance(exc, OSError | TimeoutError | asyncpg.InterfaceError | asyncpg.exceptions.InternalClientError):
        return True
    if isinstance(exc, asyncpg.PostgresError):
        state = str(getattr(exc, "sqlstate", "") or "")
        return state.startswith(_LOST_STATES) or state == RECOVERY_CONFLICT_STATE
    return False
