"""Running a GraphQL operation in-process for an MCP caller, and its errors in MCP's forms.

The operation runs against the same Strawberry schema, with the same per-request context, as
the HTTP endpoint's: a tool's input checks, limits and error codes are GraphQL's own. An error
keeps its GraphQL message and `extensions.code`:

- a tool answers it as a tool error (`isError: true`, the form the MCP specification gives to
  failures a model can read and correct), text `<CODE>: <message>`, and the GraphQL errors as
  they are in `structuredContent.errors`;
- a resource read raises it as a JSON-RPC error whose `data.code` is the GraphQL code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson
import strawberry
from graphql import GraphQLSchema, build_schema
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, CallToolResult, TextContent

from ..core.errors import HakiError
from ..core.serving.auth import Caller
from ..core.serving.consistency import TOKEN_EXTENSION, SessionToken, reads_on_primary
from ..core.serving.runtime import Runtime
from ..resolvers.context import build_context
from ..schema.errors import domain_error, format_error
from .operations import Operation
from .result_schema import result_schema


@dataclass(frozen=True)
class Invocation:
    """An authenticated call: the process's runtime, the caller (project, key, scopes) and the
    session's consistency token.

    Over stdio the process is the session: its token goes from its writes to its reads. Over
    HTTP (stateless, no session) a call sends its own token back if its client kept one, and a
    call that sends none reads from the primary: an agent that recorded a turn sees it.
    """

    rt: Runtime
    caller: Caller
    session: SessionToken = field(default_factory=SessionToken)
    stateless: bool = False


class OperationFailed(Exception):
    """An operation answered with errors, each in the GraphQL response form."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        self.errors = errors
        first = errors[0]
        self.code: str = str(first.get("extensions", {}).get("code", "INTERNAL"))
        self.message: str = str(first["message"])
        super().__init__(f"{self.code}: {self.message}")

    @classmethod
    def from_domain(cls, exc: HakiError) -> OperationFailed:
        """A failure met before the operation ran (the key, the database), as GraphQL words it."""
        return cls([{"message": exc.message, "extensions": exc.extensions()}])


class Gateway:
    """Runs the MCP operations against the served schema."""

    def __init__(self, schema: strawberry.Schema) -> None:
        self._schema = schema
        self._sdl_schema: GraphQLSchema = build_schema(schema.as_str())

    async def run(self, operation: Operation, variables: dict[str, Any], invocation: Invocation) -> dict[str, Any]:
        """The operation's `data`; raises OperationFailed with GraphQL's errors."""
        token = invocation.session.held
        context = build_context(invocation.rt, invocation.caller, token=token)
        if invocation.stateless and token is None:
            reads_on_primary(context.rt)
        result = await self._schema.execute(
            operation.document, variable_values=variables, context_value=context, operation_name=operation.name
        )
        if operation.writes and result.extensions:
            invocation.session.wrote(result.extensions.get(TOKEN_EXTENSION))
        if result.errors:
            raise OperationFailed([format_error(e) for e in result.errors])
        assert result.data is not None  # no errors: graphql-core always has data
        return result.data

    def output_schema(self, operation: Operation) -> dict[str, Any]:
        """The JSON Schema of the operation's `data`."""
        return result_schema(self._sdl_schema, operation.document)


def as_failure(exc: Exception) -> OperationFailed | None:
    """The OperationFailed an exception stands for, None when it is a bug."""
    if isinstance(exc, OperationFailed):
        return exc
    domain = exc if isinstance(exc, HakiError) else domain_error(exc)
    return OperationFailed.from_domain(domain) if domain is not None else None


def tool_result(data: dict[str, Any]) -> CallToolResult:
    """A tool's answer: the data as structured content, and as JSON text for clients that read text only."""
    return CallToolResult(content=[TextContent(type="text", text=json_text(data))], structured_content=data)


def tool_error(failure: OperationFailed) -> CallToolResult:
    """A tool error with GraphQL's codes and messages."""
    text = "\n".join(f"{e.get('extensions', {}).get('code', 'INTERNAL')}: {e['message']}" for e in failure.errors)
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content={"errors": failure.errors}, is_error=True
    )


# GraphQL codes of a request the caller must change; any other is the server's (JSON-RPC internal error).
_CALLER_CODES = frozenset(
    {
        "INVALID_INPUT",
        "BUDGET_EXCEEDED",
        "NOT_FOUND",
        "ILLEGAL_TRANSITION",
        "QUERY_TOO_COMPLEX",
        "PAYLOAD_TOO_LARGE",
        "GRAPHQL_PARSE_FAILED",
        "GRAPHQL_VALIDATION_FAILED",
    }
)
_ACCESS_CODES = frozenset({"UNAUTHENTICATED", "FORBIDDEN"})


def protocol_error(failure: OperationFailed) -> MCPError:
    """A JSON-RPC error with the GraphQL message; `data` holds the GraphQL `extensions` (its code)."""
    if failure.code in _CALLER_CODES:
        code = INVALID_PARAMS
    elif failure.code in _ACCESS_CODES:
        code = INVALID_REQUEST
    else:
        code = INTERNAL_ERROR
    return MCPError(code=code, message=failure.message, data=failure.errors[0].get("extensions"))


def json_text(data: Any) -> str:
    """Compact JSON text, non-ASCII kept as it is."""
    return orjson.dumps(data).decode()
