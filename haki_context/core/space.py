"""One embedding space per database: check it at start-up, switch it with `reembed`."""

from __future__ import annotations

import asyncpg

from ..db import meta
from .embedder import Embedder
from .progress import Progress

# The tables holding vectors, re-embedded in this order (constants: never user text in SQL).
_TABLES = ("facts", "episode_chunks")


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
                async with pool.acquire() as conn, conn.transaction():
                    await meta.update_embeddings(conn, table, [(*k, v) for k, v in zip(keys, vectors)])
                after = keys[-1]
                done += len(rows)
                progress.update(len(rows))
            counts[table] = done
    async with pool.acquire() as conn:
        await meta.record_embedding_space(conn, embedder.space)
    return counts
