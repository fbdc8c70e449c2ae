"""Giving every large scope its own vector indexes (the plan choice lives in db/retrieval.py).

Scopes below HAKI_SCOPE_INDEX_ROWS rows are searched by an exact scan; a scope
that reaches it gets a partial HNSW index (and, past HAKI_IVF_INDEX_ROWS, a
partial IVFFlat index), built in the background by the server (every
HAKI_SCOPE_INDEX_INTERVAL_S) or at once by `haki-context index-scopes`. Until the
build is done the scope keeps the exact scan, so a build in progress (or a failed
one) costs speed, never results.

The same pass keeps each indexed scope's list of common lexemes (db/scope_lexemes.py)
fresh, for the idf full-text rank, and drops the indexes of forgotten subjects that a
forget could not drop itself (it raced a build, or the database went away). `OwnIndexHints` remembers, per server, which
scopes a statement last reported with an index, to pick the statement text that
can use it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Iterable

import asyncpg

from ...db import scope_indexes as db_scope_indexes
from ...db import scope_lexemes as db_scope_lexemes
from ...db.pool import without_statement_timeout
from ...db.scope_indexes import Scope, ScopeRows
from ...settings import Settings
from ..progress import Progress

log = logging.getLogger(__name__)


async def build_pending(
    pool: asyncpg.Pool,
    min_rows: int,
    *,
    ivf_rows: int = 0,
    build_memory: str = "512MB",
    lexeme_rows: int = 1000,
    limit: int = 100,
) -> list[Scope] | None:
    """Build the indexes of every scope past `min_rows` that lacks them, one at a time, replace
    those that are stale (db/scope_indexes.py, `stale_kinds`; the IVFFlat index only for scopes of
    `ivf_rows`+ rows, 0: all), then refresh the stale
    common-lexeme lists of indexed scopes (lexemes held by `lexeme_rows`+ rows).

    Returns the scopes built or rebuilt, or None when another process holds the builders' lock
    (several servers share one database: one of them builds). Reports the rows indexed so far
    out of those to index (core/progress.py) when there is anything to build.
    """
    async with pool.acquire() as conn, without_statement_timeout(conn):  # a build outlives any request's
        if not await db_scope_indexes.try_lock(conn):
            return None
        try:
            await db_scope_indexes.configure_builder(conn, build_memory)
            built: list[Scope] = []
            to_build = await db_scope_indexes.pending(conn, min_rows, limit)
            to_rebuild = await db_scope_indexes.outdated(conn, ivf_rows, limit)
            if to_build or to_rebuild:
                total = sum(scope.rows for scope in [*to_build, *to_rebuild])
                with Progress("building scope indexes", total) as progress:
                    for scope in to_build:
                        started = time.perf_counter()
                        name = await db_scope_indexes.build(conn, scope, ivf_rows)
                        log.info(
                            "scope index %s built for %s/%s (%s, %d rows) in %.1f s",
                            name,
                            scope.project_id,
                            scope.subject_id,
                            scope.table,
                            scope.rows,
                            time.perf_counter() - started,
                        )
                        built.append(scope)
                        progress.update(scope.rows)
                    for scope in to_rebuild:
                        started = time.perf_counter()
                        kinds = await db_scope_indexes.rebuild(conn, scope, ivf_rows)
                        log.info(
                            "scope indexes (%s) replaced for %s/%s (%s, %d rows) in %.1f s",
                            ", ".join(kinds),
                            scope.project_id,
                            scope.subject_id,
                            scope.table,
                            scope.rows,
                            time.perf_counter() - started,
                        )
                        built.append(scope)
                        progress.update(scope.rows)
            for scope in await db_scope_lexemes.stale(conn, lexeme_rows, limit):
                started = time.perf_counter()
                listed = await db_scope_lexemes.refresh(conn, scope, lexeme_rows)
                log.info(
                    "common lexemes of %s/%s (%s, %d rows): %d listed in %.1f s",
                    scope.project_id,
                    scope.subject_id,
                    scope.table,
                    scope.rows,
                    listed,
                    time.perf_counter() - started,
                )
            dropped = await db_scope_indexes.drop_orphans(conn)
            if dropped:
                log.info("dropped %d scope index(es) of forgotten subjects", dropped)
            return built
        finally:
            await db_scope_indexes.reset_builder(conn)
            await db_scope_indexes.unlock(conn)


class ScopeGrowth:
    """Wakes this process's index pass as soon as a write takes a scope to a size that gets it an
    index (HAKI_SCOPE_INDEX_ROWS, and HAKI_IVF_INDEX_ROWS for its IVFFlat one), so a scope that
    a load makes large leaves the exact scan once the build is done, not up to
    HAKI_SCOPE_INDEX_INTERVAL_S later. Told by each write once it has committed (a pass woken
    before would not see the rows)."""

    def __init__(self) -> None:
        self._crossed = asyncio.Event()

    def saw(self, counts: Iterable[ScopeRows], settings: Settings) -> None:
        """Note a write's counts; a scope that reached a size with an index to build wakes the pass."""
        sizes = [n for n in (settings.scope_index_rows, settings.ivf_index_rows) if n > 0]
        if any(c.before < n <= c.after for c in counts for n in sizes):
            self._crossed.set()

    async def crossed_within(self, seconds: float) -> bool:
        """Wait up to `seconds` for a scope to reach such a size; True (and cleared) when one did."""
        try:
            async with asyncio.timeout(seconds):
                await self._crossed.wait()
        except TimeoutError:
            return False
        self._crossed.clear()
        return True


class OwnIndexHints:
    """The scopes last seen with a ready index of their own, and on which tables.

    It picks the text of the candidates statements (db/retrieval.py, "Statement
    texts"): a scope listed here gets the text that can search its own index.
    A hint, not the truth: each statement checks the index itself and reports
    it back (`saw`), so a wrong or missing entry costs one call's speed, never
    rows. Only scopes with an index are kept, the least recently seen dropped
    first past `max_scopes`.
    """

    def __init__(self, max_scopes: int = 10_000) -> None:
        self._tables: OrderedDict[tuple[str, str], frozenset[str]] = OrderedDict()
        self._max_scopes = max_scopes

    def tables(self, project_id: str, subject_id: str) -> frozenset[str]:
        """The tables on which the scope was last seen with an index of its own."""
        return self._tables.get((project_id, subject_id), frozenset())

    def saw(self, project_id: str, subject_id: str, table: str, own_index: bool | None) -> None:
        """Record what a statement on `table` reported (None: it returned no row, so said nothing)."""
        if own_index is None:
            return
        key = (project_id, subject_id)
        before = self._tables.get(key, frozenset())
        after = before | {table} if own_index else before - {table}
        if not after:
            self._tables.pop(key, None)
            return
        self._tables[key] = after
        self._tables.move_to_end(key)
        while len(self._tables) > self._max_scopes:
            self._tables.popitem(last=False)
