"""`haki-context serve | migrate | prune | reembed | build-model | index-scopes | keys create|list|revoke`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
from collections.abc import AsyncIterator

import asyncpg

from .core import keys as core_keys
from .db import embedded, migrate
from .db import keys as db_keys
from .settings import Settings, load_settings


@contextlib.asynccontextmanager
async def database(settings: Settings) -> AsyncIterator[str]:
    """The DSN to use: HAKI_DATABASE_URL, or the embedded server (attached, never stopped if running)."""
    if settings.database_url:
        yield settings.database_url
        return
    server = await asyncio.to_thread(embedded.start, settings.data_dir)
    try:
        yield server.uri
    finally:
        server.close()


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from .app import create_app

    settings = load_settings(host=args.host, port=args.port)
    app = create_app(settings)
    uvicorn.run(
        app, host=settings.host, port=settings.port, log_level="info", lifespan="on", access_log=settings.access_log
    )
    return 0


async def _migrate(settings: Settings) -> int:
    async with database(settings) as dsn:
        applied = await migrate.apply(dsn)
    print("applied: " + ", ".join(applied) if applied else "nothing to apply: the schema is up to date")
    return 0


async def _keys(settings: Settings, args: argparse.Namespace) -> int:
    async with database(settings) as dsn:
        await migrate.apply(dsn)
        conn = await asyncpg.connect(dsn)
        try:
            if args.keys_command == "create":
                new = core_keys.generate()
                await db_keys.insert_key(conn, args.project, new.key_id, new.key_hash, new.prefix, args.name)
                print(f"created key {new.key_id} for project {args.project!r} (shown once; store it now):")
                print(new.plain)
            elif args.keys_command == "list":
                for k in await db_keys.list_keys(conn, args.project):
                    state = f"revoked {k.revoked_at.isoformat()}" if k.revoked_at else "active"
                    print(f"{k.key_id}  {k.project_id}  {k.prefix}...  {k.name or '-'}  {state}")
            elif args.keys_command == "revoke":
                if not await db_keys.revoke_key(conn, args.key_id):
                    print(f"no active key {args.key_id}", file=sys.stderr)
                    return 1
                print(f"revoked {args.key_id}")
        finally:
            await conn.close()
    return 0


async def _prune(settings: Settings, days: float | None) -> int:
    from .core.traces import prune
    from .db.pool import create_pool

    days = days if days is not None else settings.trace_retention_days
    if days is None:
        print("no retention: set HAKI_TRACE_RETENTION_DAYS or pass --days", file=sys.stderr)
        return 2
    async with database(settings) as dsn:
        await migrate.apply(dsn)
        pool = await create_pool(dsn, max_size=2, statement_timeout_ms=settings.statement_timeout_ms)
        try:
            deleted = await prune(pool, days)
        finally:
            await pool.close()
    print(f"deleted {deleted} trace(s) older than {days:g} day(s)")
    return 0


async def _reembed(settings: Settings) -> int:
    from .core.embedder import Embedder, encoder_for
    from .core.space import reembed
    from .db.pool import create_pool

    encoder = encoder_for(settings)
    embedder = Embedder(encoder, batch_size=settings.embed_batch_size)
    async with database(settings) as dsn:
        await migrate.apply(dsn)
        pool = await create_pool(dsn, max_size=2, statement_timeout_ms=0)
        try:
            counts = await reembed(pool, embedder)
        finally:
            await pool.close()
            embedder.close()
    print(f"re-embedded {counts['facts']} fact(s) and {counts['episode_chunks']} chunk(s) with {embedder.name}")
    return 0


async def _index_scopes(settings: Settings) -> int:
    from .core.scope_indexes import build_pending
    from .db.pool import create_pool

    async with database(settings) as dsn:
        await migrate.apply(dsn)
        pool = await create_pool(dsn, max_size=1, statement_timeout_ms=settings.statement_timeout_ms)
        try:
            built = await build_pending(
                pool,
                settings.scope_index_rows,
                ivf_rows=settings.ivf_index_rows,
                build_memory=settings.scope_index_build_memory,
                lexeme_rows=settings.full_text_lexeme_rows,
            )
        finally:
            await pool.close()
    if built is None:
        print("another process is building scope indexes; try again when it is done", file=sys.stderr)
        return 1
    for scope in built:
        print(f"built the {scope.table} indexes of {scope.project_id}/{scope.subject_id} ({scope.rows} rows)")
    print(
        f"{len(built)} scope(s) indexed; every scope of {settings.scope_index_rows}+ rows has an HNSW index,"
        f" of {settings.ivf_index_rows}+ an IVFFlat one too"
    )
    return 0


def _build_model(settings: Settings) -> int:
    from .core.embedder import encoder_for

    encoder = encoder_for(settings)  # builds the ONNX export into HAKI_MODEL_CACHE_DIR when missing
    print(f"{encoder.name} ready (model files in {settings.models_dir})")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="haki-context", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="start the GraphQL server (GraphiQL at /graphql)")
    serve.add_argument("--host", default=None, help="bind address (HAKI_HOST, default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=None, help="port (HAKI_PORT, default 8000)")
    sub.add_parser("migrate", help="apply pending database migrations")
    sub.add_parser("reembed", help="re-embed every stored text with HAKI_EMBED_PROVIDER (switches the database)")
    sub.add_parser(
        "index-scopes",
        help="build now the HNSW index of every scope past HAKI_SCOPE_INDEX_ROWS (the server does it in the background)",
    )
    sub.add_parser("build-model", help="build the embedder's model files (the ONNX export) ahead of the first start")
    prune = sub.add_parser("prune", help="delete traces older than the retention (in batches)")
    prune.add_argument("--days", type=float, default=None, help="default: HAKI_TRACE_RETENTION_DAYS")
    keys = sub.add_parser("keys", help="manage API keys")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    create = keys_sub.add_parser("create", help="create a key; it is printed once, on the last line")
    create.add_argument("--project", required=True)
    create.add_argument("--name", default=None)
    listing = keys_sub.add_parser("list", help="list keys (never the keys themselves)")
    listing.add_argument("--project", default=None)
    revoke = keys_sub.add_parser("revoke", help="revoke a key by its id")
    revoke.add_argument("key_id")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "serve":
        return cmd_serve(args)
    settings = load_settings()
    try:
        if args.command == "migrate":
            return asyncio.run(_migrate(settings))
        if args.command == "keys":
            return asyncio.run(_keys(settings, args))
        if args.command == "prune":
            return asyncio.run(_prune(settings, args.days))
        if args.command == "reembed":
            return asyncio.run(_reembed(settings))
        if args.command == "build-model":
            return _build_model(settings)
        if args.command == "index-scopes":
            return asyncio.run(_index_scopes(settings))
    except (RuntimeError, OSError, asyncpg.PostgresError) as exc:
        # Expected operator errors (a data dir under /root, an unreachable database): one line, no traceback.
        print(f"haki-context: error: {exc}", file=sys.stderr)
        return 1
    return 2


if __name__ == "__main__":
    sys.exit(main())
