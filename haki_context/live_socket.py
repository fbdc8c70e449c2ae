"""GraphQL over WebSocket at /graphql (graphql-transport-ws): the key checked at connection_init,
errors coded as over HTTP, messages sent as text frames.

The key comes from connection_init's payload (`{"Authorization": "Bearer <key>"}`, as browsers
cannot set headers on a WebSocket), else from the upgrade request's Authorization header, and
is checked by the same Authenticator and development-mode rule as every HTTP request. A socket
without a valid key is closed with 4401, one whose key lacks the read scope with 4403, and one
that cannot be checked now (the database is down) with 1013 (try again later).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import orjson
from graphql import GraphQLError
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect
from strawberry.asgi import ASGIWebSocketAdapter
from strawberry.http.exceptions import WebSocketDisconnected
from strawberry.subscriptions.protocols.graphql_transport_ws.handlers import BaseGraphQLTransportWSHandler, Operation
from strawberry.subscriptions.protocols.graphql_transport_ws.types import ConnectionInitMessage
from strawberry.types import ExecutionResult
from strawberry.types.execution import PreExecutionError

from .core.errors import Forbidden, HakiError, Unauthenticated
from .core.serving.auth import Authenticator, authorization_of
from .core.serving.auth import Scope as KeyScope
from .resolvers.live import socket_context
from .schema.errors import domain_error, format_error

# Close codes of graphql-transport-ws, and WebSocket's own "try again later".
CLOSE_UNAUTHORIZED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_TRY_AGAIN_LATER = 1013


class TextWebSocketAdapter(ASGIWebSocketAdapter):
    """Sends each message as a text frame: the protocol's messages are JSON text, and a browser
    client reads a binary frame as a Blob it cannot parse."""

    async def send_json(self, message: Mapping[str, object]) -> None:
        try:
            await self.ws.send_text(orjson.dumps(message).decode())
        except WebSocketDisconnect as exc:
            raise WebSocketDisconnected from exc


class LiveSocketHandler(BaseGraphQLTransportWSHandler[Any, Any]):
    """graphql-transport-ws with the caller checked at connection_init; the socket's context
    (resolvers.live.SocketContext) is built then, so nothing runs before it."""

    async def handle_connection_init(self, message: ConnectionInitMessage) -> None:
        payload = message.get("payload")
        if not self.connection_init_received and (payload is None or isinstance(payload, dict)):
            ws: WebSocket = self.websocket.ws  # type: ignore[attr-defined]
            try:
                caller = await _caller(ws, payload or {})
                caller.require(KeyScope.READ)
            except HakiError as exc:
                await self._refuse(exc)
                return
            except Exception as exc:
                domain = domain_error(exc)
                if domain is None:
                    raise
                await self._refuse(domain)
                return
            state = ws.app.state
            self.context = socket_context(state.runtime, caller, state.live)
            message = {"type": "connection_init", "payload": payload or {}}
        await super().handle_connection_init(message)

    async def _refuse(self, exc: HakiError) -> None:
        if self.connection_init_timeout_task:
            self.connection_init_timeout_task.cancel()
        if isinstance(exc, Unauthenticated):
            code = CLOSE_UNAUTHORIZED
        elif isinstance(exc, Forbidden):
            code = CLOSE_FORBIDDEN
        else:
            code = CLOSE_TRY_AGAIN_LATER
        # A close reason is at most 123 bytes.
        await self.websocket.close(code=code, reason=exc.message.encode()[:123].decode(errors="ignore"))

    async def _send_result_stream(self, operation: Operation[Any, Any], result_source: Any) -> None:
        first = True
        async for result in result_source:
            if first and isinstance(result, PreExecutionError):
                await self._handle_pre_execution_error(operation, result)
                return
            if not isinstance(result, ExecutionResult):
                await self._reject_incremental_delivery(operation)
                return
            payload: dict[str, Any] = {"data": result.data}
            if result.errors:
                payload["errors"] = [format_error(e) for e in result.errors]
            await operation.send_operation_message(cast(Any, {"id": operation.id, "type": "next", "payload": payload}))
            first = False

    async def _handle_pre_execution_error(self, operation: Operation[Any, Any], result: PreExecutionError) -> None:
        assert result.errors
        if self._get_pre_execution_close_reason(result.errors[0]):
            await super()._handle_pre_execution_error(operation, result)
            return
        errors: list[GraphQLError] = list(result.errors)
        await operation.send_operation_message(
            cast(Any, {"id": operation.id, "type": "error", "payload": [format_error(e) for e in errors]})
        )


async def _caller(ws: WebSocket, payload: dict[str, object]) -> Any:
    authenticator: Authenticator = ws.app.state.authenticator
    given = [v for k, v in payload.items() if k.lower() == "authorization"]
    if given:
        if len(given) > 1 or not isinstance(given[0], str):
            raise Unauthenticated("connection_init's payload must hold one `Authorization: Bearer <key>` string")
        authorization: str | None = given[0]
    else:
        authorization = authorization_of(ws.headers.getlist("authorization"))
    return await authenticator.caller_for(authorization)


class SocketEndpoint:
    """The WebSocket side of /graphql: the GraphQL view, which runs graphql-transport-ws."""

    def __init__(self, view: Any) -> None:
        self._view = view

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope["haki_caller"] = scope["haki_project_id"] = None  # known only at connection_init
        await self._view(scope, receive, send)
