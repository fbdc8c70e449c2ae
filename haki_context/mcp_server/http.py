"""`/mcp`: the MCP server over streamable HTTP, on the running GraphQL server.

The key is checked from the headers exactly as `/graphql` checks it (the same Authenticator,
the same development-mode rule), before the SDK's transport reads a byte of the body. Each
request stands alone (the SDK's stateless mode, JSON responses): the server keeps no session,
so any process behind a load balancer can answer any request, and every request carries its
own key.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import orjson
import strawberry
from mcp.server.context import ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import INTERNAL_ERROR, INVALID_REQUEST
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from ..core.errors import HakiError, Unauthenticated, Unavailable
from ..core.serving.admission import RETRY_AFTER_S
from ..core.serving.auth import Authenticator, authorization_of
from ..core.serving.consistency import TOKEN_HEADER, SessionToken, parse_token
from ..schema.errors import domain_error
from ..settings import Settings, is_loopback
from .gateway import Gateway, Invocation
from .server import build_server

PATH = "/mcp"
# Where the endpoint leaves the authenticated caller for the tools (the request's ASGI scope).
CALLER_KEY = "haki_mcp_caller"

Lifespan = Callable[[Starlette], AbstractAsyncContextManager[None]]


class McpEndpoint:
    """The ASGI app of `/mcp`: the caller's key, then the SDK's streamable HTTP transport."""

    def __init__(self, schema: strawberry.Schema, settings: Settings) -> None:
        self._settings = settings
        self._server = build_server(Gateway(schema), caller_of_request)
        self._manager: StreamableHTTPSessionManager | None = None

    def running_during(self, lifespan: Lifespan) -> Lifespan:
        """`lifespan` with the SDK's request manager running inside it: started once the runtime
        is open, stopped (its requests cancelled) before the runtime closes."""

        @contextlib.asynccontextmanager
        async def with_mcp(app: Starlette) -> AsyncIterator[None]:
            async with lifespan(app):
                # A fresh manager per run of the lifespan: the SDK's runs only once.
                self._server.streamable_http_app(
                    streamable_http_path=PATH,
                    stateless_http=True,
                    json_response=True,
                    max_request_body_size=self._settings.max_body_bytes,
                    transport_security=transport_security(self._settings),
                )
                manager = self._server.session_manager
                async with manager.run():
                    self._manager = manager
                    try:
                        yield
                    finally:
                        self._manager = None

        return with_mcp

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        try:
            authenticator: Authenticator = request.app.state.authenticator
            authorization = authorization_of(request.headers.getlist("authorization"))
            caller = await authenticator.caller_for(authorization)
            token = SessionToken(parse_token(request.headers.get(TOKEN_HEADER)))
        except Exception as exc:  # every failure here gets a coded answer
            domain = exc if isinstance(exc, HakiError) else domain_error(exc)
            if domain is None:
                raise
            await refusal(domain)(scope, receive, send)
            return
        manager = self._manager
        if manager is None:
            await refusal(Unavailable("the MCP endpoint is not running; retry shortly"))(scope, receive, send)
            return
        scope[CALLER_KEY] = Invocation(request.app.state.runtime, caller, token, stateless=True)
        await manager.handle_request(scope, receive, send)


async def caller_of_request(ctx: ServerRequestContext[Any, Any]) -> Invocation:
    """The caller McpEndpoint authenticated for the HTTP request that carries this message."""
    request = ctx.request
    invocation = request.scope.get(CALLER_KEY) if isinstance(request, Request) else None
    if not isinstance(invocation, Invocation):  # never: the endpoint sets it before the transport reads a message
        raise Unauthenticated("the MCP request reached a tool without passing the key check")
    return invocation


def transport_security(settings: Settings) -> TransportSecuritySettings:
    """In keyless development mode on a loopback address, only loopback Host and Origin headers are
    served: a web page that rebinds its own name to 127.0.0.1 would otherwise use the memory
    without a key. With keys, the key is the guard."""
    if not (settings.effective_dev_mode and is_loopback(settings.host)):
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    names = ["127.0.0.1", "localhost", "[::1]"]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[*names, *(f"{name}:*" for name in names)],
        allowed_origins=[
            f"{scheme}://{name}{port}" for scheme in ("http", "https") for name in names for port in ("", ":*")
        ],
    )


def refusal(exc: HakiError) -> Response:
    """A JSON-RPC error answered before the MCP transport: the GraphQL message, `data.code` the GraphQL
    code, the HTTP status GraphQL would give (401 with `WWW-Authenticate: Bearer` for a key refused)."""
    code = INTERNAL_ERROR if exc.http_status >= 500 else INVALID_REQUEST
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": exc.message, "data": exc.extensions()}}
    headers = {}
    if isinstance(exc, Unauthenticated):
        headers["WWW-Authenticate"] = "Bearer"
    if isinstance(exc, Unavailable):
        headers["Retry-After"] = str(RETRY_AFTER_S)
    return Response(orjson.dumps(body), status_code=exc.http_status, headers=headers, media_type="application/json")
