"""One embedding space per database: check it at start-up, switch it with `reembed`."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import asyncpg

from ...db import meta
from ..progress import Progress
from .embedder import Embedder

# The tables holding vectors, re-embedded in this order (constants: never user text in SQL).
_TABLES = ("facts", "episode_chunks")


# A batch that gave way to a request's write is tried again after a pause that doubles up to
# _RETRY_MAX_S; after _GIVE_UP_S of giving way, the command stops (it can be run again).
_RETRY_FIRST_S = 0.05
_RETRY_MAX_S = 2.0
_GIVE_UP_S = 300.0

log = logging.getLogger(__name__)


class ReembedBlocked(RuntimeError):
    """A batch of re-embedding kept giving way to concurrent writes of the same rows."""


class EmbedderMismatch(RuntimeError):
    """The database holds vectors of another embedding space than the server's embedder."""


async def check_embedding_space(pool: asyncpg.Pool, embedder: Embedder) -> None:
    """Record the space on first use; refuse to serve vectors of another space."""
    async with pool.acquire() as conn:
        recorded = await meta.embedding_space(conn)
        if recorded is None:
            await meta.record_embedding_space(conn, embedder.space)
            return
        if recorded != embedder.space and await meta.holds_vectors(conn):
            raise EmbedderMismatch(
                f"this database holds vectors of the embedding space {recorded!r}, but the server's embedder "
                f"({embedder.name}) writes {embedder.space!r}; mixing them would corrupt every search. "
                "Run `haki-context reembed` with the new HAKI_EMBED_PROVIDER to switch the database, "
                "or start with the embedder the database was built with."
            )
        if recorded != embedder.space:
            await meta.record_embedding_space(conn, embedder.space)


async def reembed(pool: asyncpg.Pool, embedder: Embedder, *, batch_size: int = 256) -> dict[str, int]:
    """Re-embed every fact and chunk from its stored text with `embedder`, then record its space.

    Reports rows done / total as it goes (core/progress.py): a large database takes minutes."""
    async with pool.acquire() as conn:
        total = sum([await meta.count_rows(conn, table) for table in _TABLES])
    counts: dict[str, int] = {}
    with Progress(f"re-embedding with {embedder.name}", total) as progress:
        for table in _TABLES:
            after: tuple[object, ...] | None = None
            done = 0
            while True:
                async with pool.acquire() as conn:
                    rows = await meta.text_batch(conn, table, after, batch_size)
                if not rows:
                    break
                vectors = await embedder.embed_many([r["text"] for r in rows])
                keys = [tuple(r)[:-1] for r in rows]
                await _write_batch(pool, table, [(*k, v) for k, v in zip(keys, vectors)])
                after = keys[-1]
                done += len(rows)
                progress.update(len(rows))
            counts[table] = done
    async with pool.acquire() as conn:
        await meta.record_embedding_space(conn, embedder.space)
    return counts


async def _write_batch(pool: asyncpg.Pool, table: str, rows: list[tuple[Any, ...]]) -> None:
    """Write one batch, giving way to requests: a forget or a write holding the same rows goes
    first, and the batch is written again after it (a row deleted meanwhile is skipped)."""
    pause, started = _RETRY_FIRST_S, time.monotonic()
    while True:
        async with pool.acquire() as conn:
            if await meta.update_embeddings(conn, table, rows):
                return
        if time.monotonic() - started > _GIVE_UP_S:
            raise ReembedBlocked(
                f"re-embedding {table} gave way to concurrent writes of the same rows for {_GIVE_UP_S:.0f} s; "
                "run `haki-context reembed` again when the database is quieter"
            )
        log.info("reembed: a batch of %s gave way to a concurrent write; trying it again", table)
        await asyncio.sleep(pause)
        pause = min(pause * 2, _RETRY_MAX_S)
