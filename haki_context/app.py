"""The Starlette application: lifespan resources, auth, body limit, health, GraphQL."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import asyncpg
import orjson
from cross_web import HTTPException
from graphql import GraphQLError
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.types import Message, Receive, Scope, Send
from strawberry.asgi import GraphQL
from strawberry.exceptions import MissingQueryError
from strawberry.http.websocket_origin import normalize_allowed_origins
from strawberry.schema.exceptions import CannotGetOperationTypeError
from strawberry.subscriptions import GRAPHQL_TRANSPORT_WS_PROTOCOL
from strawberry.types import ExecutionResult
from strawberry.types.unset import UNSET

from .core.context.assembler import warm_connections
from .core.context.token_counts import counter as token_counter
from .core.embedding.embedder import Embedder, encoder_for
from .core.embedding.space import check_embedding_space
from .core.errors import BadRequest, HakiError, PayloadTooLarge, Unavailable
from .core.limits import MAX_JSON_DEPTH, check_json_depth
from .core.serving import jobs
from .core.serving.admission import RETRY_AFTER_S
from .core.serving.auth import Authenticator, authorization_of
from .core.serving.consistency import TOKEN_EXTENSION, TOKEN_HEADER, parse_token
from .core.serving.jobs import Job
from .core.serving.live import LiveLimits, LiveTraces
from .core.serving.replicas import ReplicaSet
from .core.serving.runtime import Runtime, open_pool
from .core.serving.supervisor import Supervisor
from .cors import cors_middleware
from .dashboard import dashboard_page, front_page
from .db import embedded, migrate
from .export_http import export_subject
from .live_socket import LiveSocketHandler, SocketEndpoint, TextWebSocketAdapter
from .mcp_server.http import McpEndpoint
from .media_types import ACCEPTABLE, ResponseType, negotiate
from .metrics import MetricsEndpoint, RestartLines, record_refusal
from .resolvers.context import build_context
from .schema import schema_for
from .schema.errors import RequestErrorCode, domain_error, format_error, http_status
from .schema.ide import render_graphiql_page
from .settings import MetricsAccess, OtelExporter, Settings
from .startup_errors import check_connection_budget, database_target
from .telemetry import TracingMiddleware, configure

log = logging.getLogger("haki_context")

EXAMPLE_OPERATION = """\
# Ask for the context of one subject, as an agent does before a model call.
# Record events and assert facts first (see the Docs pane, Mutation).
query Context {
  context(subjectId: "user-42", query: "Which language should invoices be written in?", budget: 900) {
    rendered
    usedTokens
    facts { predicate value score reasonCode sourceEvents { id kind occurredAt } }
    episodes { eventId chunk occurredAt excerpt score }
    trace {
      id
      counts { included excluded blocked }
      decisions { itemKind decision reasonCode rank score similarity fullText recency fact { predicate } }
    }
  }
}
"""


# Strawberry refuses these before anything runs with a plain-text 400; they are request errors
# like a parse or validation failure, answered in the GraphQL shape with their code.
_REQUEST_ERRORS: dict[type[Exception], RequestErrorCode] = {
    MissingQueryError: RequestErrorCode.PARSE_FAILED,  # an empty document
    CannotGetOperationTypeError: RequestErrorCode.VALIDATION_FAILED,  # no operation, or none by that name
}


class HakiGraphQL(GraphQL):
    """Strawberry's ASGI view with our context, error codes, HTTP statuses, JSON encoder and the
    response media type negotiated from `Accept` (media_types.py).

    In application/graphql-response+json a request refused before execution (parse,
    validation, variables, no operation) is answered without `data`, 400; in application/json,
    200 with `"data": null`. UNAUTHENTICATED is 401 and UNAVAILABLE 503 (with Retry-After) in both.
    """

    # Subscriptions: graphql-transport-ws only, its key checked at connection_init (live_socket.py).
    graphql_transport_ws_handler_class = LiveSocketHandler
    websocket_adapter_class = TextWebSocketAdapter

    def __init__(self, schema: Any, *, graphiql: bool) -> None:
        super().__init__(
            schema,
            graphql_ide="graphiql" if graphiql else None,
            allow_queries_via_get=False,
            subscription_protocols=(GRAPHQL_TRANSPORT_WS_PROTOCOL,),
            connection_init_wait_timeout=timedelta(seconds=10),
        )

    async def get_context(self, request: Any, response: Any) -> Any:
        caller = request.scope["haki_caller"]  # None only on a GET, which executes nothing
        if caller is None:
            return None
        return build_context(request.app.state.runtime, caller, token=request.scope["haki_consistency_token"])

    async def run(self, request: Any, context: Any = UNSET, root_value: Any = UNSET) -> Any:
        if isinstance(request, Request) and request.method == "POST" and _response_type(request) is None:
            refusal = BadRequest(f"the Accept header admits no type this server answers in: {ACCEPTABLE}")
            return error_response(refusal, status_code=406)
        if isinstance(request, Request) and request.method == "GET" and "query" in request.query_params:
            # Operations run on POST only (the key is read before the body there); answered in
            # the GraphQL shape with a code, not Strawberry's plain-text 400.
            refusal = BadRequest("GraphQL operations are answered on POST /graphql; GET /graphql serves GraphiQL")
            return error_response(refusal)
        return await super().run(request, context, root_value)

    async def get_sub_response(self, request: Any) -> Response:
        sub_response = await super().get_sub_response(request)
        sub_response.media_type = (_response_type(request) or ResponseType.JSON).value
        return sub_response

    async def execute_single(self, *args: Any, **kwargs: Any) -> ExecutionResult:
        try:
            return await super().execute_single(*args, **kwargs)
        except HTTPException as exc:
            cause = exc.__cause__  # what Strawberry mapped to its 400
            code = _REQUEST_ERRORS.get(type(cause)) if isinstance(cause, Exception) else None
            if code is None:
                raise
            return ExecutionResult(data=None, errors=[GraphQLError(exc.reason, extensions={"code": code.value})])

    async def process_result(self, request: Any, result: ExecutionResult) -> Any:
        data: dict[str, Any] = {"data": result.data}
        if result.errors:
            data["errors"] = [format_error(e) for e in result.errors]
            refused = result.data is None and all(e.path is None for e in result.errors)
            if refused and _response_type(request) is ResponseType.GRAPHQL_RESPONSE_JSON:
                del data["data"]  # nothing ran: no data entry, and a 4xx (create_response)
        if result.extensions:
            data["extensions"] = result.extensions
        return data

    def create_response(self, response_data: Any, sub_response: Any) -> Response:
        response = super().create_response(response_data, sub_response)
        response.headers["content-type"] = ResponseType(sub_response.media_type).content_type
        token = (
            (response_data.get("extensions") or {}).get(TOKEN_EXTENSION) if isinstance(response_data, dict) else None
        )
        if token is not None:
            response.headers[TOKEN_HEADER] = token
        if isinstance(response_data, dict):
            status = http_status(
                response_data.get("errors") or [], ran="data" in response_data, data=response_data.get("data")
            )
            if status is not None:
                response.status_code = status
                if status == Unavailable.http_status:  # shed or database down: tell clients when to retry
                    response.headers["Retry-After"] = str(RETRY_AFTER_S)
        return response

    def encode_json(self, data: object) -> bytes:
        return orjson.dumps(data)

    async def render_graphql_ide(self, request: Any) -> HTMLResponse:
        return HTMLResponse(render_graphiql_page(EXAMPLE_OPERATION, static_prefix="/static/graphiql"))


def _response_type(request: Request) -> ResponseType | None:
    """The response type the request's Accept header negotiates (None: it admits neither)."""
    return negotiate(request.headers.get("accept"))


def error_response(exc: HakiError, *, status_code: int | None = None) -> JSONResponse:
    """A GraphQL-shaped error answered before execution (auth, body size, database down)."""
    return _Refusal(exc, status_code=status_code or exc.http_status)


class _Refusal(JSONResponse):
    """A refusal in the media type the request's Accept negotiates, chosen when it is sent (the
    request is known then): application/graphql-response+json leaves out `data` on a 4xx or 5xx;
    application/json (also where Accept admits neither) holds `"data": null`.

    It keeps the error's message and extensions, never the exception (its traceback would hold
    the refused body)."""

    def __init__(self, exc: HakiError, *, status_code: int) -> None:
        self._error = {"message": exc.message, "extensions": exc.extensions()}
        headers = {"Retry-After": str(RETRY_AFTER_S)} if isinstance(exc, Unavailable) else None
        super().__init__({"data": None, "errors": [self._error]}, status_code=status_code, headers=headers)
        self.headers["content-type"] = ResponseType.JSON.content_type

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        response_type = negotiate(Headers(scope=scope).get("accept"))
        if response_type is ResponseType.GRAPHQL_RESPONSE_JSON and self.status_code >= 400:
            self.body = self.render({"errors": [self._error]})
            self.headers["content-length"] = str(len(self.body))
            self.headers["content-type"] = response_type.content_type
        await super().__call__(scope, receive, send)


class GraphQLEndpoint:
    """Guards the GraphQL view: the API key (from the headers, before the body is read), then the
    request body (its size while it is read, its content type, its JSON shape and nesting)."""

    def __init__(self, view: HakiGraphQL, settings: Settings) -> None:
        self._view = view
        self._max_body = settings.max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        if request.method != "POST":
            scope["haki_project_id"] = scope["haki_caller"] = None
            await self._view(scope, receive, send)
            return
        try:
            # Who is calling comes from the headers alone: a request without a valid key is
            # answered before a byte of its body is read.
            authenticator: Authenticator = request.app.state.authenticator
            authorization = authorization_of(request.headers.getlist("authorization"))
            caller = await authenticator.caller_for(authorization)
            scope["haki_caller"], scope["haki_project_id"] = caller, caller.project_id
            scope["haki_consistency_token"] = parse_token(request.headers.get(TOKEN_HEADER))
            _check_content_type(request.headers.get("content-type"))
            body = await self._read_body(request)
            _check_graphql_body(body)
        except Exception as exc:  # every failure here gets a coded answer
            domain = exc if isinstance(exc, HakiError) else domain_error(exc)
            if domain is None:
                raise
            record_refusal([domain.code])
            refusal = error_response(domain)
            # The error's traceback holds this frame, and the frame the error: dropping it breaks
            # that cycle, so a refused body is freed at once, not at the next full collection.
            del domain
            await refusal(scope, receive, send)
            return
        await self._view(scope, _replay(body), send)

    async def _read_body(self, request: Request) -> bytes:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self._max_body:
            raise self._too_large()
        # One growing buffer, not a list of small chunks: a large buffer lives in its own
        # mapping, given back to the system once freed, where many small ones would stay in the
        # heap after a large body was refused.
        body = bytearray()
        async for chunk in request.stream():
            if len(body) + len(chunk) > self._max_body:  # a body that never declared its length stops here
                raise self._too_large()
            body += chunk
        return bytes(body)

    def _too_large(self) -> PayloadTooLarge:
        return PayloadTooLarge(
            f"the request body is over {self._max_body} bytes (HAKI_MAX_BODY_BYTES); send a large batch in parts"
        )


def _check_content_type(header: str | None) -> None:
    mime = (header or "").split(";", 1)[0].strip().lower()
    if mime != "application/json":
        raise BadRequest("the request body must be JSON, sent as `Content-Type: application/json`")


def _check_graphql_body(body: bytes) -> None:
    """Refuse a body that is no GraphQL request, so that Strawberry, which parses the same bytes
    next, only ever sees a JSON object of the right shape and a nesting it can walk."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        data = _lenient_json(body)
    if not isinstance(data, dict):
        raise BadRequest("the request body must be a JSON object with a `query` string")
    if not isinstance(data.get("query"), str):
        raise BadRequest("`query` must be a string holding the GraphQL operation", field="query")
    for name, kind, label in (("variables", dict, "an object"), ("operationName", str, "a string")):
        if data.get(name) is not None and not isinstance(data[name], kind):
            raise BadRequest(f"`{name}` must be {label} or null", field=name)
    if data.get("extensions") is not None and not isinstance(data["extensions"], dict):
        raise BadRequest("`extensions` must be an object or null", field="extensions")
    if not check_json_depth(data, MAX_JSON_DEPTH):
        raise BadRequest(f"the request body nests arrays and objects deeper than {MAX_JSON_DEPTH} levels")


def _lenient_json(body: bytes) -> Any:
    """What the strict parser refused, read as Strawberry reads it: JSON that also admits NaN,
    Infinity and unpaired surrogate escapes, whose values the field checks then refuse by name.
    Bytes that are not UTF-8 and nesting past the stack are refused here."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequest("the request body is not valid UTF-8") from exc
    try:
        return json.loads(text)
    except RecursionError as exc:
        raise BadRequest(f"the request body nests arrays and objects deeper than {MAX_JSON_DEPTH} levels") from exc
    except ValueError as exc:
        raise BadRequest("the request body is not valid JSON") from exc


def _replay(body: bytes) -> Receive:
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.sleep(3600)  # nothing more: the client may only disconnect
        return {"type": "http.disconnect"}

    return receive


async def open_runtime(settings: Settings) -> tuple[Runtime, contextlib.AsyncExitStack]:
    """Start (or attach to) the database, migrate, open the pool and load the embedder.

    Each step logs its line before it starts, so a slow one (a first initdb, a model build)
    shows what the process is doing."""
    stack = contextlib.AsyncExitStack()
    server: embedded.EmbeddedPostgres | None = None
    try:
        if settings.database_url:
            dsn = settings.database_url
            log.info("using the PostgreSQL at %s (HAKI_DATABASE_URL)", database_target(dsn))
        else:
            server = await start_embedded(settings)
            stack.callback(server.close)
            dsn = server.uri
        # A standby allows at least the primary's max_connections (PostgreSQL's rule for hot
        # standbys): the primary's budget holds for every replica. Checked before migrating, so
        # a start refused for it leaves the schema as it was.
        await check_connection_budget(dsn, workers=settings.workers, pool_max_size=settings.pool_max_size)
        await apply_migrations(dsn)
        pool = await open_pool(dsn, settings)
        stack.push_async_callback(close_pool, pool)
        replicas = await _open_replicas(pool, settings, stack) if settings.replica_urls else None
        log.info("loading the embedder (HAKI_EMBED_PROVIDER=%s)", settings.embed_provider.value)
        encoder = await asyncio.to_thread(encoder_for, settings)
        embedder = Embedder(encoder, cache_size=settings.query_cache_size, batch_size=settings.embed_batch_size)
        stack.callback(embedder.close)
        await check_embedding_space(pool, embedder)
        await embedder.embed_query("warm up")  # the first encode pays one-off costs
        await asyncio.to_thread(token_counter, settings.tokenizer)  # the encoding, checked and loaded
        await warm_connections(pool, settings)  # and the first plans
        log.info("embedder ready: %s", embedder.name)
        return Runtime(pool=pool, embedder=embedder, settings=settings, embedded=server, replicas=replicas), stack
    except BaseException:
        await stack.aclose()
        raise


async def _open_replicas(pool: asyncpg.Pool, settings: Settings, stack: contextlib.AsyncExitStack) -> ReplicaSet:
    """The replicas of HAKI_REPLICA_URLS, checked once (a replica down is left out, not fatal:
    the primary serves its reads) and then every HAKI_DATABASE_CHECK_INTERVAL_S until the
    runtime closes."""

    async def open_replica_pool(url: str) -> asyncpg.Pool:
        replica_pool = await open_pool(url, settings)
        try:
            await warm_connections(replica_pool, settings)
        except BaseException:
            replica_pool.terminate()
            raise
        return replica_pool

    replicas = ReplicaSet(
        settings.replica_urls,
        primary=pool,
        open_pool=open_replica_pool,
        max_lag_ms=settings.replica_max_lag_ms,
        wait_ms=settings.replica_wait_ms,
        check_interval_s=settings.database_check_interval_s,
    )
    stack.push_async_callback(replicas.close)
    log.info("checking %d read replica(s) (HAKI_REPLICA_URLS)", len(replicas.replicas))
    await replicas.check()
    monitor = asyncio.create_task(replicas.monitor())
    stack.push_async_callback(_cancelled, monitor)
    for view in replicas.views():
        log.info("replica %s: %s", view.target, view.state.value.replace("_", " "))
    return replicas


async def _cancelled(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def start_embedded(settings: Settings) -> embedded.EmbeddedPostgres:
    """Start the embedded server in a thread; a stop asked meanwhile waits for that start and
    then stops the server, which would otherwise outlive the process."""
    starting = asyncio.ensure_future(asyncio.to_thread(embedded.start, settings.data_dir))
    try:
        return await asyncio.shield(starting)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            (await starting).close()
        raise


# Seconds the pool's connections get to be given back once the server stops taking calls:
# a connection still held past them (a statement stuck on a lock) is cut.
POOL_CLOSE_TIMEOUT_S = 3.0


async def close_pool(pool: asyncpg.Pool, timeout_s: float = POOL_CLOSE_TIMEOUT_S) -> None:
    """Close `pool` gracefully within `timeout_s`, else terminate its connections."""
    try:
        await asyncio.wait_for(pool.close(), timeout_s)
    except TimeoutError:
        log.warning("closing the database connections took over %g s; cutting them", timeout_s)
        pool.terminate()
    except (OSError, asyncpg.InterfaceError, asyncpg.PostgresError):
        pool.terminate()  # connections to a database that is gone: nothing left to close politely


async def apply_migrations(dsn: str) -> None:
    """Apply pending migrations, saying first how many (one rewrites large tables)."""
    conn = await asyncpg.connect(dsn)
    try:
        pending = await migrate.pending(conn)
    finally:
        await conn.close()
    if not pending:
        log.info("the database schema is up to date")
        return
    log.info("applying %s", migrate.summary(pending))  # a first start has every one: not listed by name
    await migrate.apply(dsn)


@contextlib.asynccontextmanager
async def serving(app: Starlette, rt: Runtime, settings: Settings) -> AsyncIterator[None]:
    """Serve `rt`: attach it, run the background jobs (trace retention, scope indexes) until
    the server stops, and say where GraphQL is served."""
    _attach(app, rt, settings)
    tasks: list[asyncio.Task[None]] = []
    supervised = rt.embedded is not None and rt.embedded.owned
    pool_lines = _PoolReconnectLines(quiet=supervised)
    logging.getLogger("asyncpg.pool").addFilter(pool_lines)
    restart_lines = RestartLines()  # counts the supervisor's restarts for /metrics
    logging.getLogger("haki_context.supervisor").addFilter(restart_lines)
    if rt.embedded is not None and rt.embedded.owned:
        # Only the owner restarts the embedded server; an external one (or another process's)
        # is left to reconnect by the pool.
        supervisor = Supervisor(rt.embedded, rt.pool, settings.database_check_interval_s)
        app.state.supervisor = supervisor
        tasks.append(asyncio.create_task(supervisor.run()))
    if settings.trace_retention_days is not None:
        tasks.append(asyncio.create_task(_retention_loop(rt, settings.trace_retention_days)))
    if settings.scope_index_interval_s > 0:
        tasks.append(asyncio.create_task(_scope_index_loop(rt, settings)))
    settle_garbage_collector()
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    log.info("serving GraphQL at http://%s:%s/graphql", host, settings.port)
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        # Wait for the jobs to end (a pass mid-statement is cut), so none outlives the pool.
        if tasks:
            await asyncio.wait(tasks, timeout=POOL_CLOSE_TIMEOUT_S)
        await app.state.live.close()  # its own connection, closed before the database stops
        app.state.supervisor = None
        logging.getLogger("asyncpg.pool").removeFilter(pool_lines)
        logging.getLogger("haki_context.supervisor").removeFilter(restart_lines)


class CutCallLines(logging.Filter):
    """A call still running when the stop's grace period ends is cancelled, as intended;
    uvicorn logs that with a traceback, made here one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.ERROR and "timeout graceful shutdown exceeded" in str(record.msg):
            record.levelno, record.levelname = logging.WARNING, "WARNING"  # the grace period did its job
        if record.exc_info and isinstance(record.exc_info[1], asyncio.CancelledError):
            record.msg, record.args = "a call still running at the end of the grace period was cancelled", ()
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.exc_info, record.exc_text = None, None
        return True


class _PoolReconnectLines(logging.Filter):
    """asyncpg's pool logs a traceback each time it fails to reopen its minimum of connections
    while the database is down. Under a supervisor, whose own lines say when the database is
    lost and back, these are dropped; otherwise each is one line without the traceback."""

    def __init__(self, *, quiet: bool) -> None:
        super().__init__()
        self._quiet = quiet

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.getMessage().startswith("Failed to restore the pool connection floor"):
            return True
        if self._quiet:
            return False
        cause = record.exc_info[1] if record.exc_info else None
        record.msg, record.args = (
            "the pool could not reopen a database connection (%s); retrying",
            (type(cause).__name__ if cause is not None else "unknown",),
        )
        record.exc_info, record.exc_text = None, None
        return True


def create_app(settings: Settings, runtime: Runtime | None = None, *, background: bool = False) -> Starlette:
    """The ASGI app. With `runtime` given, the app uses it and does not close it; it runs the
    background jobs only with `background` (the CLI, which opens the runtime before serving so
    that a failure to start is one error line; tests run none)."""
    schema = schema_for(settings)
    view = HakiGraphQL(schema, graphiql=settings.graphiql)
    # A page on another origin may open the GraphQL WebSocket where it may POST (HAKI_CORS_ORIGINS).
    view.allowed_origins = normalize_allowed_origins(settings.cors_origins or ())
    mcp = McpEndpoint(schema, settings)

    @mcp.running_during  # the MCP transport runs while the runtime is open
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if runtime is not None:
            if not background:
                yield
                return
            async with serving(app, runtime, settings):
                yield
            return
        rt, stack = await open_runtime(settings)
        async with stack, serving(app, rt, settings):
            yield

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> JSONResponse:
        rt: Runtime | None = getattr(request.app.state, "runtime", None)
        if rt is None:
            return JSONResponse({"status": "starting"}, status_code=503)
        supervisor: Supervisor | None = getattr(request.app.state, "supervisor", None)
        if supervisor is not None and not supervisor.up:
            return JSONResponse({"status": "database unavailable"}, status_code=503)
        try:
            async with asyncio.timeout(2.0):
                async with rt.pool.acquire() as conn:
                    await conn.fetchval("SELECT 1")
                    pending = await migrate.pending(conn)
        except Exception:  # any failure means not ready
            return JSONResponse({"status": "database unavailable"}, status_code=503)
        if pending:
            return JSONResponse({"status": "migrations pending", "pending": pending}, status_code=503)
        ready: dict[str, Any] = {"status": "ready", "embedder": rt.embedder.name}
        if rt.replicas is not None:  # ready whatever their state: the primary serves what they cannot
            ready["replicas"] = [
                {"target": v.target, "state": v.state.value, "lagMs": v.lag_ms} for v in rt.replicas.views()
            ]
        return JSONResponse(ready)

    routes = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/graphql", GraphQLEndpoint(view, settings), methods=["GET", "POST"]),
        WebSocketRoute("/graphql", SocketEndpoint(view)),
        Route("/export", export_subject, methods=["GET"]),
        Route("/mcp", mcp, methods=["POST"]),  # stateless: no stream to GET, no session to DELETE
        Route("/", front_page, methods=["GET"]),
        Route("/dashboard", dashboard_page, methods=["GET"]),
        Mount("/static", StaticFiles(packages=[("haki_context", "static")]), name="static"),
    ]
    if settings.metrics is not MetricsAccess.OFF:
        routes.append(Route("/metrics", MetricsEndpoint(settings.metrics), methods=["GET"]))
    if settings.otel_exporter is not OtelExporter.NONE:
        configure(settings.otel_exporter)
    # Spans per request while tracing is on (telemetry.configure; a passthrough otherwise).
    middleware = [*cors_middleware(settings), Middleware(TracingMiddleware)]
    app = Starlette(routes=routes, lifespan=lifespan, middleware=middleware)
    if runtime is not None:
        _attach(app, runtime, settings)
    return app


# Requests allocate many short-lived containers, so the youngest generation fills fast at the
# default threshold (700); collecting it less often costs nothing in cycles found.
GC_YOUNG_THRESHOLD = 5_000


def settle_garbage_collector() -> None:
    """Once started, move everything allocated so far (schema, pool, model) out of the
    collector's reach and collect the youngest generation less often.

    Otherwise every full collection walks those startup objects again, a pause some calls
    pay in full (figures in docs/performance.md). Cycles made by requests are still
    collected; only startup objects are never walked again.
    """
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)


async def _retention_loop(rt: Runtime, days: float, every_seconds: float = 3600.0) -> None:
    """Prune traces past HAKI_TRACE_RETENTION_DAYS every hour, by one process of all those
    serving the database (core/serving/jobs.py); at start-up when no one did in the last hour."""
    from .core.history.traces import prune

    failures = _FailureLog("retention pass")
    while True:
        try:
            if await jobs.claim(rt.pool, Job.TRACE_RETENTION, every_seconds):
                deleted = await prune(rt.pool, days)
                if deleted:
                    log.info("retention: deleted %d trace(s) older than %g day(s)", deleted, days)
            failures.succeeded()
        except Exception as exc:  # retention must never take the server down
            failures.failed(exc)
        await asyncio.sleep(jobs.wake_interval(every_seconds))


# How soon a pass that a write woke tries again while another process's pass holds the builders' lock.
WOKEN_RETRY_S = 1.0


async def _scope_index_loop(rt: Runtime, settings: Settings) -> None:
    """Build the HNSW index of every scope past HAKI_SCOPE_INDEX_ROWS every HAKI_SCOPE_INDEX_INTERVAL_S,
    by one process of all those serving the database (core/serving/jobs.py), at start-up when
    none did within the interval (builds run concurrently with requests: CREATE INDEX CONCURRENTLY),
    and at once when a write of this process takes a scope to that size (`rt.scope_growth`)."""
    from .core.serving.scope_indexes import build_pending

    failures = _FailureLog("scope index build")
    every = settings.scope_index_interval_s
    woken = False
    while True:
        retry = False
        try:
            if woken or await jobs.claim(rt.pool, Job.SCOPE_INDEXES, every):
                built = await build_pending(
                    rt.pool,
                    settings.scope_index_rows,
                    ivf_rows=settings.ivf_index_rows,
                    build_memory=settings.scope_index_build_memory,
                    lexeme_rows=settings.full_text_lexeme_rows,
                )
                # Another process's pass holds the builders' lock: it may have listed the scopes before this one grew.
                retry = woken and built is None
            failures.succeeded()
        except Exception as exc:  # a failed build leaves the exact scan in place; retry later
            failures.failed(exc)
        wait_s = WOKEN_RETRY_S if retry else jobs.wake_interval(every)
        woken = await rt.scope_growth.crossed_within(wait_s) or retry


class _FailureLog:
    """The log of a background job's failures: one line per kind of failure until a pass
    succeeds, so a database that is down for an hour is not a traceback every pass.

    An expected failure (the database unavailable, a timeout) is a warning line; anything
    else is logged with its traceback, once.
    """

    def __init__(self, job: str) -> None:
        self._job = job
        self._seen: set[str] = set()

    def failed(self, exc: Exception) -> None:
        expected = domain_error(exc)
        kind = expected.code if expected is not None else type(exc).__name__
        if kind in self._seen:
            return
        self._seen.add(kind)
        if expected is not None:
            log.warning("%s failed (%s: %s); retrying later", self._job, kind, expected.message)
        else:
            log.error("%s failed; retrying later", self._job, exc_info=exc)

    def succeeded(self) -> None:
        if self._seen:
            log.info("%s succeeded again", self._job)
            self._seen.clear()


def _attach(app: Starlette, rt: Runtime, settings: Settings) -> None:
    """The process-wide resources every request reads (the server keeps no other state)."""
    app.state.runtime = rt
    app.state.authenticator = Authenticator(rt, dev_mode=settings.effective_dev_mode)
    dsn = settings.database_url or (rt.embedded.uri if rt.embedded is not None else None)
    limits = LiveLimits(
        settings.subscriptions_per_key, settings.subscriptions_per_process, settings.subscription_buffer
    )
    app.state.live = LiveTraces(dsn, limits)
