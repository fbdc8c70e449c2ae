"""Turning exceptions into GraphQL errors with a stable `extensions.code`.

This is the one place where domain errors, asyncpg failures and GraphQL
request errors get their code. Anything unexpected is INTERNAL: its message
is replaced and it is logged with a reference id, so no traceback or SQL text
ever reaches a client.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from enum import Enum
from typing import Any

import asyncpg
from graphql import GraphQLError

from ..core.errors import HakiError, InvalidInput, QueryTooComplex, Timeout, Unavailable

log = logging.getLogger("haki_context.errors")

# Server-side states of a database that is going away or not there yet.
_SHUTDOWN_ERRORS: tuple[type[BaseException], ...] = (
    asyncpg.exceptions.CannotConnectNowError,
    asyncpg.exceptions.AdminShutdownError,
    asyncpg.exceptions.CrashShutdownError,
    asyncpg.exceptions.TooManyConnectionsError,
    asyncpg.exceptions.ConnectionFailureError,
    asyncpg.exceptions.ConnectionDoesNotExistError,  # closed mid-operation (a failover); a PostgresError
)
# A transaction the server rolled back, whole, for a concurrent one: a deadlock's victim, a
# serialization failure. (Not every TransactionRollbackError: 40003 leaves the outcome unknown.)
_ROLLED_BACK: tuple[type[BaseException], ...] = (
    asyncpg.exceptions.DeadlockDetectedError,
    asyncpg.exceptions.SerializationError,
)
# Client-side: a connection lost or broken mid-query ("cannot switch to state"), refused, timed out.
_CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
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
    then `__cause__` / `__context__`. asyncpg's timeouts are mapped to TIMEOUT; lost
    connections and transactions rolled back by a concurrent one (nothing of them written)
    to UNAVAILABLE, to be retried; their text (which may hold SQL) is not ours.
    """
    for cause in _chain(exc):
        if isinstance(cause, HakiError):
            return cause, True
        if isinstance(cause, asyncpg.exceptions.QueryCanceledError):
            return Timeout("the statement took longer than HAKI_STATEMENT_TIMEOUT_MS"), False
        if isinstance(cause, _ROLLED_BACK):
            return Unavailable("a concurrent write of the same rows rolled this one back whole; retry it"), False
        if isinstance(cause, _SHUTDOWN_ERRORS) or (
            isinstance(cause, _CONNECTION_ERRORS) and not isinstance(cause, asyncpg.PostgresError)
        ):
            return Unavailable("the database is unavailable; retry shortly"), False
    return None, False


def _chain(exc: BaseException | None) -> Iterator[BaseException]:
    """`exc` and what it wraps: `original_error` first (GraphQL wraps resolver and coercion
    errors), then `__cause__` / `__context__`; eight links at most."""
    for _ in range(8):
        if exc is None:
            return
        yield exc
        exc = getattr(exc, "original_error", None) or exc.__cause__ or exc.__context__


def _log_cancelled(exc: BaseException | None) -> None:
    """Say in the log why the database cancelled a statement (its statement timeout, or a cancel
    request): the response says TIMEOUT only."""
    for cause in _chain(exc):
        if isinstance(cause, asyncpg.exceptions.QueryCanceledError):
            log.warning("TIMEOUT: %s", cause.args[0] if cause.args else cause)
            return


class RequestErrorCode(str, Enum):
    """The codes of errors that refuse a request before it runs. Each is attached where the error
    is raised: the parser, the validation step and each limit rule, the coercion of variables."""

    PARSE_FAILED = "GRAPHQL_PARSE_FAILED"  # the document is no GraphQL (or holds none)
    VALIDATION_FAILED = "GRAPHQL_VALIDATION_FAILED"  # a validation rule refused it, or no operation to run
    QUERY_TOO_COMPLEX = QueryTooComplex.code  # over a depth, alias, token or `context` field limit
    INVALID_INPUT = InvalidInput.code  # a variable missing, of the wrong type, or out of its scalar's range


def coded(error: GraphQLError, code: RequestErrorCode) -> GraphQLError:
    """`error` carrying `code` in its extensions, unless its source already gave it one."""
    if attached_code(error) is None:
        error.extensions = {**(error.extensions or {}), "code": code.value}
    return error


def attached_code(error: GraphQLError) -> str | None:
    """The code the error's source attached, if any."""
    code = (error.extensions or {}).get("code")
    return code if isinstance(code, str) else None


def is_unexpected(error: GraphQLError) -> bool:
    """True for errors that are bugs (INTERNAL): logged with a traceback, masked in the response."""
    return domain_error(error.original_error) is None and attached_code(error) is None


def format_error(error: GraphQLError) -> dict[str, Any]:
    """The response form of one error: message, locations, path and `extensions.code`.

    The code is the domain error's behind it (a resolver's, a scalar's), else the one its source
    attached; an error with neither is a bug: INTERNAL, its message masked and logged."""
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
            if isinstance(domain, Timeout):
                _log_cancelled(original)
        formatted["extensions"] = domain.extensions()
        return formatted
    if attached_code(error) is not None:
        formatted["extensions"] = dict(error.extensions or {})
        return formatted
    ref = uuid.uuid4().hex[:12]
    if original is not None:
        log.error("internal error %s", ref, exc_info=(type(original), original, original.__traceback__))
    else:
        log.error("internal error %s: an error without a code: %s", ref, error.message)
    formatted["message"] = f"Internal error (reference {ref})."
    formatted["extensions"] = {"code": "INTERNAL", "reference": ref}
    return formatted


def http_status(errors: list[dict[str, Any]], *, ran: bool = True, data: Any = None) -> int | None:
    """The HTTP status a response's errors call for (None: the default 200).

    `ran` is False for a request refused before execution answered without `data`
    (application/graphql-response+json): 400, or 500 where the refusal was a bug. UNAVAILABLE
    is 503 (retry) only when no root field answered: where one did, a mutation's earlier field
    may have been written, and a client must not send the whole document again."""
    codes = {e.get("extensions", {}).get("code") for e in errors}
    if "UNAUTHENTICATED" in codes:
        return 401
    if "UNAVAILABLE" in codes and not (isinstance(data, dict) and any(v is not None for v in data.values())):
        return 503
    if not ran:
        return 500 if "INTERNAL" in codes else 400
    return None
