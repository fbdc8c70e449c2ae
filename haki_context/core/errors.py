"""The domain error tree. Each error carries the stable code clients see.

    HakiError
    ├── InvalidInput          INVALID_INPUT        a value outside its limits, a malformed id or date
    │   └── BadRequest        INVALID_INPUT        a request body that is no GraphQL request (HTTP 400)
    ├── BudgetExceeded        BUDGET_EXCEEDED      budget <= 0 or above HAKI_MAX_BUDGET
    ├── NotFound              NOT_FOUND            a write naming an unknown id (or another project's)
    ├── IllegalTransition     ILLEGAL_TRANSITION   a fact/conflict transition the table does not allow
    ├── Unauthenticated       UNAUTHENTICATED      no key or a bad key, outside development mode
    ├── Forbidden             FORBIDDEN            the key lacks the scope (read, write, erase) asked for
    ├── QueryTooComplex       QUERY_TOO_COMPLEX    depth, aliases, tokens or context fields over limits
    ├── PayloadTooLarge       PAYLOAD_TOO_LARGE    request body over HAKI_MAX_BODY_BYTES
    ├── Timeout               TIMEOUT              a statement over HAKI_STATEMENT_TIMEOUT_MS
    └── Unavailable           UNAVAILABLE          the database cannot be reached

Anything else is INTERNAL: masked in the response, logged with an id.
"""

from __future__ import annotations


class HakiError(Exception):
    """Base of every expected failure; `code` goes to `extensions.code`."""

    code = "INTERNAL"
    http_status = 200

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field

    def extensions(self) -> dict[str, object]:
        ext: dict[str, object] = {"code": self.code}
        if self.field:
            ext["field"] = self.field
        return ext


class InvalidInput(HakiError):
    """A value outside its limits, a malformed id or date, a NUL in stored text."""

    code = "INVALID_INPUT"


class BadRequest(InvalidInput):
    """A request body that is no GraphQL request: not JSON, not UTF-8, not an object, a field of
    the wrong type, nesting too deep, a content type other than JSON. Answered before execution."""

    http_status = 400


class BudgetExceeded(HakiError):
    """The token budget is not a positive integer within HAKI_MAX_BUDGET."""

    code = "BUDGET_EXCEEDED"


class NotFound(HakiError):
    """A write named an id that does not exist in the caller's project."""

    code = "NOT_FOUND"


class IllegalTransition(HakiError):
    """The fact or conflict is not in a state that allows this operation."""

    code = "ILLEGAL_TRANSITION"


class Unauthenticated(HakiError):
    """No valid API key, outside local development mode."""

    code = "UNAUTHENTICATED"
    http_status = 401


class Forbidden(HakiError):
    """The caller's key lacks the scope the operation needs (read, write or erase).

    Inside GraphQL it is the failing field's error (HTTP 200, the other fields answer); a
    request refused whole before execution (GET /export) is answered 403."""

    code = "FORBIDDEN"
    http_status = 403


class QueryTooComplex(HakiError):
    """The operation is over a depth, alias, token or `context` field limit."""

    code = "QUERY_TOO_COMPLEX"


class PayloadTooLarge(HakiError):
    """The request body is over HAKI_MAX_BODY_BYTES."""

    code = "PAYLOAD_TOO_LARGE"
    http_status = 413


class Timeout(HakiError):
    """A statement ran past HAKI_STATEMENT_TIMEOUT_MS."""

    code = "TIMEOUT"


class Unavailable(HakiError):
    """The database cannot be reached right now; retry later."""

    code = "UNAVAILABLE"
    http_status = 503
