"""The asyncpg pool: codecs for vector and jsonb, and per-connection settings."""

from __future__ import annotations

from typing import Any

import asyncpg
import orjson
from pgvector.asyncpg import register_vector


def _jsonb_encode(value: Any) -> bytes:
    return b"\x01" + orjson.dumps(value)  # jsonb's binary format: version 1, then the JSON text


def _jsonb_decode(data: bytes) -> Any:
    return orjson.loads(data[1:])


def _json_encode(value: Any) -> bytes:
    return orjson.dumps(value)


async def init_connection(conn: asyncpg.Connection) -> None:
    """Register the codecs every query relies on (run once per new connection).

    Binary jsonb codecs also let COPY (benchmarks' bulk loads) carry JSON.
    """
    await register_vector(conn)
    await conn.set_type_codec(
        "jsonb", encoder=_jsonb_encode, decoder=_jsonb_decode, schema="pg_catalog", format="binary"
    )
    await conn.set_type_codec("json", encoder=_json_encode, decoder=orjson.loads, schema="pg_catalog", format="binary")


async def keep_session(conn: asyncpg.Connection) -> None:
    """Reset hook of the pool: nothing to undo.

    The server never changes session state (its locks are transaction-scoped,
    it sets no session variables), so the default reset statement
    (`RESET ALL; UNLISTEN *; ...`) would only add a round trip to every
    checkout. An open transaction is still rolled back by asyncpg itself.
    """


async def create_pool(
    dsn: str,
    *,
    min_size: int,
    max_size: int,
    idle_lifetime_s: float,
    statement_timeout_ms: int,
    hnsw_ef_search: int,
    hnsw_max_scan_tuples: int,
    ivf_probes: int,
) -> asyncpg.Pool:
    """A pool whose connections carry our codecs and search settings.

    `hnsw.iterative_scan = relaxed_order` makes a scope-filtered HNSW scan keep
    going until it has enough rows (without it pgvector silently returns a few of
    the rows asked for); results are re-sorted by distance in the statement. The scope's IVFFlat
    index is read `ivf_probes` lists deep, and iterates the same way.

    `idle_lifetime_s`: how long an idle connection lives, 0 for as long as the
    pool (asyncpg's own default, 300 s, closes every idle connection beyond
    `min_size`: the next call then opens one and plans its statements anew).

    `plan_cache_mode = auto` (PostgreSQL's default, said here because the
    retrieval statements are written for it): a prepared statement is planned for
    its values five times, then once for all if that plan is no costlier. The
    candidates statements are costly to plan (docs/performance.md); a large scope's own partial
    HNSW index, which a plan made once for all cannot pick from parameters, is
    named with constants in a text of that scope's own (db/retrieval.py,
    "Statement texts"). `standard_conforming_strings = on` (also the default) is
    what makes those constants' quoting complete.
    """
    pool = await asyncpg.create_pool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        init=init_connection,
        reset=keep_session,
        timeout=5.0,  # connecting: a database that is down is answered fast, never waited on
        max_inactive_connection_lifetime=idle_lifetime_s,
        server_settings={
            "application_name": "haki-context",
            "statement_timeout": str(statement_timeout_ms),
            "hnsw.iterative_scan": "relaxed_order",
            "hnsw.ef_search": str(hnsw_ef_search),
            "hnsw.max_scan_tuples": str(hnsw_max_scan_tuples),
            "ivfflat.probes": str(ivf_probes),
            "ivfflat.iterative_scan": "relaxed_order",
            "jit": "off",
            "plan_cache_mode": "auto",
            "standard_conforming_strings": "on",
        },
    )
    assert pool is not None
    return pool
