"""The exceptions of the client: one `HakiError` per failed call, carrying the server's code.

    HakiError                   .code: the GraphQL error's `extensions.code`, or a client code
    ├── InvalidInputError       INVALID_INPUT
    ├── BudgetExceededError     BUDGET_EXCEEDED
    ├── NotFoundError           NOT_FOUND
    ├── IllegalTransitionError  ILLEGAL_TRANSITION
    ├── UnauthenticatedError    UNAUTHENTICATED
    ├── ForbiddenError          FORBIDDEN
    ├── QueryTooComplexError    QUERY_TOO_COMPLEX
    ├── PayloadTooLargeError    PAYLOAD_TOO_LARGE
    ├── StatementTimeoutError   TIMEOUT               a statement ran past the server's limit
    ├── UnavailableError        UNAVAILABLE           retried by the client, raised once retries are spent
    ├── GraphQLRequestError     GRAPHQL_PARSE_FAILED, GRAPHQL_VALIDATION_FAILED
    ├── InternalError           INTERNAL              masked by the server, with a reference
    ├── HttpStatusError         HTTP_ERROR            a non-2xx answer without GraphQL errors
    ├── InvalidResponseError    INVALID_RESPONSE      an answer that is no GraphQL response
    ├── IncompleteExportError   INCOMPLETE_EXPORT     an export stream that ended without its last line
    └── TransportError          TRANSPORT_ERROR       no answer: connection refused, reset, timed out

A code this client does not know yet is raised as a plain `HakiError` with that code.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class HakiError(Exception):
    """A failed call. `code` is the server's `extensions.code` (or one of the client's codes);
    `errors` holds every GraphQL error of the response, `data` any partial data."""

    code: str = "UNKNOWN"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        status_code: int | None = None,
        errors: list[dict[str, Any]] | None = None,
        data: dict[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.status_code = status_code
        self.errors = errors or []
        self.data = data
        self.retry_after = retry_after

    @property
    def extensions(self) -> dict[str, Any]:
        """The first GraphQL error's extensions (`code`, and `field` or `reference` when given)."""
        if self.errors and isinstance(self.errors[0].get("extensions"), dict):
            return dict(self.errors[0]["extensions"])
        return {"code": self.code}

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class InvalidInputError(HakiError):
    """A value outside its limits, a malformed id or date, a variable of the wrong type."""

    code = "INVALID_INPUT"


class BudgetExceededError(HakiError):
    """The token budget is not a positive integer within the server's maximum."""

    code = "BUDGET_EXCEEDED"


class NotFoundError(HakiError):
    """A write named an id that does not exist in the caller's project."""

    code = "NOT_FOUND"


class IllegalTransitionError(HakiError):
    """The fact or conflict is not in a state that allows the change."""

    code = "ILLEGAL_TRANSITION"


class UnauthenticatedError(HakiError):
    """No valid API key (unknown, revoked or malformed), outside the server's development mode."""

    code = "UNAUTHENTICATED"


class ForbiddenError(HakiError):
    """The key is valid but lacks the scope the operation needs."""

    code = "FORBIDDEN"


class QueryTooComplexError(HakiError):
    """The operation is over a depth, alias, token or `context` field limit."""

    code = "QUERY_TOO_COMPLEX"


class PayloadTooLargeError(HakiError):
    """The request body is over the server's limit."""

    code = "PAYLOAD_TOO_LARGE"


class StatementTimeoutError(HakiError):
    """A database statement ran past the server's statement timeout."""

    code = "TIMEOUT"


class UnavailableError(HakiError):
    """The server cannot serve now (database down, overloaded); `retry_after` is its hint in seconds."""

    code = "UNAVAILABLE"


class GraphQLRequestError(HakiError):
    """The document does not parse or does not validate against the server's schema."""

    code = "GRAPHQL_VALIDATION_FAILED"


class InternalError(HakiError):
    """An unexpected server failure; `extensions["reference"]` finds it in the server's log."""

    code = "INTERNAL"


class HttpStatusError(HakiError):
    """A non-2xx HTTP answer that carries no GraphQL error (a proxy's page, a 404)."""

    code = "HTTP_ERROR"


class InvalidResponseError(HakiError):
    """A 2xx answer that is not a GraphQL response (not JSON, or neither `data` nor `errors`)."""

    code = "INVALID_RESPONSE"


class IncompleteExportError(HakiError):
    """An export stream ended without its closing `{"type": "end"}` line, or with counts that
    disagree with the records before it: the connection was cut; export again."""

    code = "INCOMPLETE_EXPORT"


class TransportError(HakiError):
    """No answer came: connection refused or reset, or the client's timeout passed.
    The underlying httpx exception is the `__cause__`. Not retried: the call may have run."""

    code = "TRANSPORT_ERROR"


_BY_CODE: dict[str, type[HakiError]] = {
    cls.code: cls
    for cls in (
        InvalidInputError,
        BudgetExceededError,
        NotFoundError,
        IllegalTransitionError,
        UnauthenticatedError,
        ForbiddenError,
        QueryTooComplexError,
        PayloadTooLargeError,
        StatementTimeoutError,
        UnavailableError,
        InternalError,
    )
}
_BY_CODE["GRAPHQL_PARSE_FAILED"] = GraphQLRequestError
_BY_CODE["GRAPHQL_VALIDATION_FAILED"] = GraphQLRequestError


def error_for(
    errors: list[dict[str, Any]],
    *,
    status_code: int | None,
    data: dict[str, Any] | None = None,
    retry_after: float | None = None,
) -> HakiError:
    """The exception for a response's GraphQL errors: the class of the first error's code."""
    first = errors[0]
    extensions = first.get("extensions")
    code = extensions.get("code") if isinstance(extensions, Mapping) else None
    if not isinstance(code, str):
        code = "INTERNAL" if status_code is None or status_code < 400 else HttpStatusError.code
    message = first.get("message")
    cls = _BY_CODE.get(code, HakiError)
    return cls(
        message if isinstance(message, str) else repr(first),
        code=code,
        status_code=status_code,
        errors=errors,
        data=data,
        retry_after=retry_after,
    )
