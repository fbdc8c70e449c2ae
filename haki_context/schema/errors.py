"""Turning exceptions into GraphQL errors with a stable `extensions.code`.

This is the one place where domain errors, asyncpg failures and GraphQL
request errors get their code. Anything unexpected is INTERNAL: its message
is replaced and it is logged with a reference id, so no traceback or SQL text
ever reaches a client.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import asyncpg
from graphql import GraphQLError

from ..core.errors import HakiError, Timeout, Unavailable

log = logging.getLogger("haki_context.errors")

_COMPLEXITY_MARKERS = (
    "exceeds maximum operation depth",
    "aliases found. Allowed",
    "maximum number of tokens",
    "more than",  # graphql-core: "Document contains more than N tokens"
)

# Server-side states of a database that is going away or not there yet.
_SHUTDOWN_ERRORS: tuple[type[BaseException], ...] = (
    asyncpg.exceptions.CannotConnectNowError,
    asyncpg.exceptions.AdminShutdownError,
    asyncpg.exceptions.CrashShutdownError,
    asyncpg.exceptions.TooManyConnectionsError,
    asyncpg.exceptions.ConnectionFailureError,
)
# Client-side: a connection lost or broken mid-query ("cannot switch to state"), refused, timed out.
_CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    asyncpg.exceptions.ConnectionDoesNotExistError,
    asyncpg.exceptions.InternalClientError,
    asyncpg.exceptions.InterfaceError,
    ConnectionError,
    OSError,
    TimeoutError,
)


def domain_error(exc: BaseException | None) -> HakiError | None:
    """The HakiError an exception stands for, if it is an expected failure."""
    return _find(exc)[0]


def _find(exc: BaseException | None) -> tuple[HakiError | None, bool]:
    """(the expected failure behind `exc`, whether our code raised it).

    Follows `original_error` first (GraphQL wraps resolver and coercion errors),
    then `__cause__` / `__context__`. asyncpg's timeouts and lost connections are
    mapped to TIMEOUT and UNAVAILABLE; their text (which may hold SQL) is not ours.
    """
    for _ in range(8):
        if exc is None:
            break
        if isinstance(exc, HakiError):
            return exc, True
        if isinstance(exc, asyncpg.exceptions.QueryCanceledError):
            return Timeout("the statement took longer than HAKI_STATEMENT_TIMEOUT_MS"), False
        if isinstance(exc, _SHUTDOWN_ERRORS) or (
            isinstance(exc, _CONNECTION_ERRORS) and not isinstance(exc, asyncpg.PostgresError)
        ):
            return Unavailable("the database is unavailable; retry shortly"), False
        exc = getattr(exc, "original_error", None) or exc.__cause__ or exc.__context__
    return None, False


def is_unexpected(error: GraphQLError) -> bool:
    """True for errors that are bugs (INTERNAL): logged with a traceback, masked in the response."""
    return error.original_error is not None and not _is_coercion(error) and domain_error(error.original_error) is None


def format_error(error: GraphQLError) -> dict[str, Any]:
    """The response form of one error: message, locations, path and `extensions.code`."""
    formatted: dict[str, Any] = {"message": error.message}
    if error.locations:
        formatted["locations"] = [{"line": loc.line, "column": loc.column} for loc in error.locations]
    if error.path:
        formatted["path"] = list(error.path)
    original = error.original_error
    domain, ours = _find(original)
    if domain is not None:
        if not ours:  # our own messages are safe to show as GraphQL wrapped them; a driver's may hold SQL
            formatted["message"] = domain.message
        formatted["extensions"] = domain.extensions()
        return formatted
    if original is None or _is_coercion(error):
        code = "QUERY_TOO_COMPLEX" if _is_complexity(error.message) else _request_code(error)
        formatted["extensions"] = {**(error.extensions or {}), "code": code}
        return formatted
    ref = uuid.uuid4().hex[:12]
    log.error("internal error %s", ref, exc_info=(type(original), original, original.__traceback__))
    formatted["message"] = f"Internal error (reference {ref})."
    formatted["extensions"] = {"code": "INTERNAL", "reference": ref}
    return formatted


def _is_coercion(error: GraphQLError) -> bool:
    # graphql-core's variable coercion ("Variable '$x' got invalid value ...") wraps the parse error.
    return error.path is None and error.message.startswith("Variable '$")


def _is_complexity(message: str) -> bool:
    return any(marker in message for marker in _COMPLEXITY_MARKERS) and (
        "depth" in message or "aliases" in message or "tokens" in message
    )


def _request_code(error: GraphQLError) -> str:
    existing = (error.extensions or {}).get("code")
    if isinstance(existing, str):
        return existing
    if _is_coercion(error):
        return "INVALID_INPUT"  # a variable of the wrong type, missing, or out of its scalar's range
    if error.message.startswith("Syntax Error"):
        return "GRAPHQL_PARSE_FAILED"
    return "GRAPHQL_VALIDATION_FAILED"


def http_status(errors: list[dict[str, Any]]) -> int | None:
    """The HTTP status a response's errors call for (None: the default 200)."""
    codes = {e.get("extensions", {}).get("code") for e in errors}
    if "UNAUTHENTICATED" in codes:
        return 401
    if "UNAVAILABLE" in codes:
        return 503
    return None
