"""The erase lock of a subject: writes share it, forgetting the subject owns it.

Every transaction that writes a subject's memory (events and their chunks, facts, conflict
sets, a scope's common lexemes, an import) first takes the subject's erase lock in SHARE mode;
`forgetSubject` takes it EXCLUSIVE for its whole transaction. So a write racing a forget either
commits before the forget reads anything (and is deleted with the rest) or starts after it has
committed (and stays): never half. Shared holders never wait for one another, so writes of one
subject run as concurrently as before. Both are transaction-level advisory locks, released at
commit or rollback.

The key is a 64-bit hash of (project, subject) with a seed of its own, so it never meets the
fact writes' per-subject lock (db/facts.py, seed 0) nor the constant keys of migrations and
index builds. Two subjects whose hashes collide only wait for each other's forget.
"""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg

ERASE_LOCK_SEED = 0x4A4B_4552

# The lock's key for ($1 project, $2 subject), as SQL: statements that take it with other work
# in one round trip (db/facts.py, lock_subject) use this text.
ERASE_LOCK_KEY = f"hashtextextended($1 || chr(31) || $2, {ERASE_LOCK_SEED})"


async def share(conn: asyncpg.Connection, project_id: str, subject_ids: Sequence[str]) -> None:
    """Hold the erase locks of `subject_ids` in SHARE mode until the transaction ends.

    Taken in the order of the subjects' ids, so that two writers of the same subjects (waiting
    behind a forget of one) never hold them crosswise."""
    await conn.execute(
        f"SELECT pg_advisory_xact_lock_shared(hashtextextended($1 || chr(31) || s, {ERASE_LOCK_SEED}))"
        " FROM unnest($2::text[]) WITH ORDINALITY AS t(s, n) ORDER BY n",
        project_id,
        sorted(set(subject_ids)),
    )


async def own(conn: asyncpg.Connection, project_id: str, subject_id: str) -> None:
    """Hold the subject's erase lock EXCLUSIVE until the transaction ends: no write of the
    subject is under way once this returns, and none starts before the transaction ends."""
    await conn.execute(f"SELECT pg_advisory_xact_lock({ERASE_LOCK_KEY})", project_id, subject_id)
