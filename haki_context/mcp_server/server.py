"""The MCP server: the memory's tools and resources, on the official `mcp` SDK (MCPServer).

Each tool validates its arguments against its input schema (the SDK, from the signature),
then runs one GraphQL operation (operations.py) for its caller; its `outputSchema` is that
operation's result schema. Who the caller is comes from the transport (`CallerOf`): the key
of the HTTP request, or the key the stdio process was started with.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Annotated, Any, Literal

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.tools import Tool
from mcp_types import CallToolResult, ToolAnnotations
from pydantic import BaseModel, Field
from pydantic.config import JsonDict

from .. import __version__
from ..core.models import AssertMode, Volatility
from ..core.serving.auth import Scope
from .gateway import (
    Gateway,
    Invocation,
    OperationFailed,
    as_failure,
    json_text,
    protocol_error,
    tool_error,
    tool_result,
)
from .operations import (
    ACTIVE_FACTS,
    ASSERT_FACT,
    EXPLAIN,
    FACTS_PAGE,
    FORGET_SUBJECT,
    GET_CONTEXT,
    REMEMBER,
    REPLAY,
    RETRACT_FACT,
    Operation,
)

# How a transport names the caller of a message (the HTTP request's key, the stdio process's).
CallerOf = Callable[[ServerRequestContext[Any, Any]], Awaitable[Invocation]]

INSTRUCTIONS = """\
A long-term memory about the people and things you work with (subjects). Before answering \
anything about a subject, call get_context with what you are about to answer: it returns the \
facts and dated conversation excerpts worth knowing, packed under a token budget, each fact \
with its id and validity. After an exchange worth keeping, call remember with its messages; \
when you learn something durable (a preference, a decision, an attribute), call assert_fact. \
If a fact you were given is wrong, retract_fact it or assert_fact the correction. explain \
shows why a get_context call served what it served; replay asks a past get_context call again \
(as the memory stood then, or as it stands now) and says what changed."""

# Where the memory's data is named as resources.
FACTS_URI = "haki://subjects/{subject}/facts"
TRACE_URI = "haki://traces/{trace_id}"
# Pages of FACTS_PAGE the facts resource reads at most: a subject's newest active facts.
MAX_FACT_PAGES = 10

DATE_TIME: JsonDict = {"format": "date-time"}

Subject = Annotated[
    str,
    Field(
        description="Who or what the memory is about: a stable id you choose, e.g. a user id "
        "'user-42' (1..128 characters). Use the same id every time for the same subject."
    ),
]


class Message(BaseModel):
    """One turn of a conversation, as it was said."""

    speaker: str = Field(description="Who said it: 'user', 'assistant', or the person's name.")
    text: str = Field(description="What was said, verbatim.")
    occurred_at: str | None = Field(
        default=None,
        description="When it was said, ISO-8601 with an offset, e.g. 2026-08-01T10:00:00+00:00. Default: now.",
        json_schema_extra=DATE_TIME,
    )


class Event(BaseModel):
    """Something other than a conversation turn that happened to the subject."""

    kind: str = Field(description="What kind of event, e.g. 'tool.result' or 'order.shipped' (1..128 characters).")
    payload: Any = Field(description="The event's data: any JSON value, at most 256 KiB serialized.")
    occurred_at: str | None = Field(
        default=None,
        description="When it happened, ISO-8601 with an offset. Default: now.",
        json_schema_extra=DATE_TIME,
    )


# The event kind a remembered conversation turn is recorded under (as the README's examples do).
MESSAGE_KIND = "conversation.message"


class MemoryTools:
    """The tools, each bound to the gateway and to how the transport names its caller."""

    def __init__(self, gateway: Gateway, caller_of: CallerOf) -> None:
        self._gateway = gateway
        self._caller_of = caller_of

    async def _run(self, operation: Operation, variables: dict[str, Any], ctx: Context[Any, Any]) -> CallToolResult:
        try:
            invocation = await self._caller_of(ctx.request_context)
            data = await self._gateway.run(operation, variables, invocation)
        except Exception as exc:
            failure = as_failure(exc)
            if failure is None:
                raise  # a bug: the SDK logs it and answers a generic tool error
            return tool_error(failure)
        return tool_result(data)

    async def get_context(
        self,
        subject: Subject,
        query: Annotated[
            str,
            Field(
                description="What you are about to answer or do, in plain words, e.g. the user's "
                "latest message. Memory is ranked by relevance to it."
            ),
        ],
        ctx: Context[Any, Any],
        *,
        budget: Annotated[
            int | None,
            Field(
                description="The most tokens the packet may take in your prompt (a token is about "
                "4 characters). Default: 900."
            ),
        ] = None,
        as_of: Annotated[
            str | None,
            Field(
                description="Answer as the memory stood at this past instant, ISO-8601 with an offset, e.g. "
                "2026-08-01T10:00:00+00:00: only facts recorded by then and not yet superseded or retracted "
                "then, and events recorded by then. Default: now. Not in the future, nor before the "
                "project's first record.",
                json_schema_extra=DATE_TIME,
            ),
        ] = None,
        tokenizer: Annotated[
            Literal["ESTIMATE", "CL100K_BASE", "O200K_BASE"] | None,
            Field(
                description="Count the budget in your model's tokens: CL100K_BASE for GPT-4 and GPT-3.5, "
                "O200K_BASE for GPT-4o and later; ESTIMATE counts 4 characters a token. Default: the server's."
            ),
        ] = None,
    ) -> CallToolResult:
        """Recall what the memory holds about a subject that is relevant to a query. Call it before
        answering anything about the subject. Returns `rendered`, a text block ready to put in your
        prompt: the relevant facts and dated conversation excerpts, packed under the token budget.
        `facts` lists each fact served with its `id`, `validFrom`/`validTo` and score, so you can
        cite a fact or correct it (retract_fact, assert_fact); `episodes` the excerpts, with their
        dates. `traceId` names the record of this call: pass it to explain to see why each item
        was served or left out. An empty `rendered` comes with `emptyReason`: NO_MEMORY (nothing is known about the subject),
        NO_RELEVANT_MEMORY (nothing about this query), or BUDGET_TOO_SMALL (ask again with a larger
        budget). With `as_of`, the
        packet as it would have been at that past instant (what an agent was given then)."""
        variables = {"subject": subject, "query": query, "budget": budget, "asOf": as_of, "tokenizer": tokenizer}
        return await self._run(GET_CONTEXT, variables, ctx)

    async def remember(
        self,
        subject: Subject,
        ctx: Context[Any, Any],
        messages: Annotated[
            list[Message] | None,
            Field(description="Conversation turns to record, in the order they were said."),
        ] = None,
        events: Annotated[
            list[Event] | None,
            Field(description="Other events to record (tool results, actions, observations)."),
        ] = None,
    ) -> CallToolResult:
        """Record what happened with a subject, verbatim: conversation turns (`messages`) and other
        events (`events`). Call it after each exchange worth keeping. What is recorded is found
        again by get_context as dated excerpts, and its ids can be cited as the sources of a fact
        (assert_fact's `source_event_ids`). Up to 1,000 entries per call; all are recorded or none.
        Returns the recorded events' ids, in the order given (messages first)."""
        inputs = [
            {
                "subjectId": subject,
                "kind": MESSAGE_KIND,
                "payload": {"speaker": m.speaker, "text": m.text},
                "occurredAt": m.occurred_at,
            }
            for m in messages or ()
        ]
        inputs += [
            {"subjectId": subject, "kind": e.kind, "payload": e.payload, "occurredAt": e.occurred_at}
            for e in events or ()
        ]
        return await self._run(REMEMBER, {"inputs": inputs}, ctx)

    async def assert_fact(
        self,
        subject: Subject,
        predicate: Annotated[
            str,
            Field(
                description="What the fact is about, as a short snake_case name, e.g. 'invoice_language', "
                "'employer', 'allergy' (1..128 characters). Reuse the same predicate for the same attribute."
            ),
        ],
        value: Annotated[
            Any,
            Field(description="The fact's value: any JSON value, e.g. 'French', 42, true or an object."),
        ],
        ctx: Context[Any, Any],
        mode: Annotated[
            AssertMode,
            Field(
                description="What happens to the subject's current fact of the same predicate: SUPERSEDE "
                "replaces it (the default); CONTEST opens a conflict, and neither is served until it is "
                "resolved; ADD keeps both (for predicates with several values)."
            ),
        ] = AssertMode.SUPERSEDE,
        confidence: Annotated[float | None, Field(description="How sure you are, 0..1.")] = None,
        valid_from: Annotated[
            str | None,
            Field(description="When the fact became true, ISO-8601 with an offset.", json_schema_extra=DATE_TIME),
        ] = None,
        valid_to: Annotated[
            str | None,
            Field(
                description="When the fact stops being true, ISO-8601 with an offset; it is never served after.",
                json_schema_extra=DATE_TIME,
            ),
        ] = None,
        volatility: Annotated[
            Volatility,
            Field(description="How fast the fact goes stale: STABLE (the default), SLOW, VOLATILE or EPHEMERAL."),
        ] = Volatility.STABLE,
        source_event_ids: Annotated[
            list[str] | None,
            Field(description="Ids of the events (from remember) the fact was drawn from, of the same subject."),
        ] = None,
    ) -> CallToolResult:
        """Store a durable fact about a subject as a predicate and a value, e.g. predicate
        'invoice_language', value 'French'. Call it when you learn something that should hold in
        later conversations: a preference, a decision, an attribute. Asserting the value the
        subject already has reinforces it; a new value supersedes the old one (see `mode`).
        Returns `outcome` (CREATED, SUPERSEDED_PREVIOUS, REINFORCED or CONFLICT_OPENED), the
        fact with its `id`, and the facts it superseded."""
        fact = {
            "subjectId": subject,
            "predicate": predicate,
            "value": value,
            "mode": mode.value,
            "confidence": confidence,
            "validFrom": valid_from,
            "validTo": valid_to,
            "volatility": volatility.value,
            "sourceEventIds": source_event_ids,
        }
        return await self._run(ASSERT_FACT, {"input": fact}, ctx)

    async def retract_fact(
        self,
        fact_id: Annotated[str, Field(description="The fact's id, as get_context or assert_fact returned it.")],
        ctx: Context[Any, Any],
        reason: Annotated[str | None, Field(description="Why the fact is retracted, for the audit trail.")] = None,
    ) -> CallToolResult:
        """Take a fact out of service because it is wrong or no longer true: it is never served
        again, and stays readable for audit. To change a value, prefer assert_fact with the new
        value, which supersedes the old one. Returns the fact with its new status (RETRACTED)."""
        return await self._run(RETRACT_FACT, {"id": fact_id, "reason": reason}, ctx)

    async def explain(
        self,
        trace_id: Annotated[str, Field(description="The traceId a get_context call returned.")],
        ctx: Context[Any, Any],
    ) -> CallToolResult:
        """Explain a get_context call: every fact and episode it considered, in rank order, with its
        decision (INCLUDED, EXCLUDED or BLOCKED), the reason (TOP_SCORE, MULTI_HOP_EXPANSION,
        OVER_BUDGET, BELOW_RELEVANCE_FLOOR, CONFLICT_OPEN, VOLATILITY_EXPIRED, CITED_BY_FACT,
        SOURCES_SERVED, SAME_TEXT_SERVED) and its score components (similarity, full-text rank, recency). `trace` is
        null for an unknown id."""
        return await self._run(EXPLAIN, {"id": trace_id}, ctx)

    async def replay(
        self,
        trace_id: Annotated[str, Field(description="The traceId a get_context call returned.")],
        ctx: Context[Any, Any],
        compare_with_now: Annotated[
            bool,
            Field(
                description="Ask the memory as it stands now instead of as it stood at the call's instant, "
                "and say why each item changed. Default: false."
            ),
        ] = False,
        budget: Annotated[
            int | None,
            Field(description="Another token budget for the replay. Default: the call's own."),
        ] = None,
    ) -> CallToolResult:
        """Ask a past get_context call again and say what differs, to debug what an agent was given.
        By default it runs at the call's own instant under the settings it ran under, and reproduces
        its decisions (`diff.identical`); with `compare_with_now` it asks the memory as it stands
        now. Returns the new `packet` (`rendered`), the `original` call, and `diff`: the counts
        (`added`, `removed`, `moved`, `scoreChanged`, `decisionChanged`) and each changed item
        with its `kinds` (ADDED, REMOVED, MOVED, SCORE_CHANGED, DECISION_CHANGED), its decision
        `before` and `after` (with the fact or event), and `why` (e.g. superseded or retracted
        since, recorded after the call, held in a conflict set now). Writes no trace. NOT_FOUND for
        a trace unknown, pruned or of a forgotten subject."""
        overrides = None if budget is None else {"budget": budget}
        return await self._run(REPLAY, {"traceId": trace_id, "with": overrides, "now": compare_with_now}, ctx)

    async def forget_subject(self, subject: Subject, ctx: Context[Any, Any]) -> CallToolResult:
        """Erase everything the memory holds about a subject, for good: its events, facts,
        conflicts and context traces. Only when the person asks to be forgotten (a right to
        erasure) or their data must go; it cannot be undone. Needs a key allowed to erase.
        Returns how many items of each kind were deleted, and the id of the audit record
        (which holds the counts, never the content)."""
        return await self._run(FORGET_SUBJECT, {"subject": subject}, ctx)

    def tools(self) -> list[Tool]:
        """The tools with their schemas and hints."""
        read = ToolAnnotations(read_only_hint=True, open_world_hint=False)
        write = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
        specs: list[tuple[Callable[..., Awaitable[CallToolResult]], Operation, str, ToolAnnotations]] = [
            (self.get_context, GET_CONTEXT, "Recall context", read),
            (self.remember, REMEMBER, "Remember events", write),
            (self.assert_fact, ASSERT_FACT, "Assert a fact", write),
            (
                self.retract_fact,
                RETRACT_FACT,
                "Retract a fact",
                ToolAnnotations(
                    read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False
                ),
            ),
            (
                self.explain,
                EXPLAIN,
                "Explain a context call",
                ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False),
            ),
            (
                self.replay,
                REPLAY,
                "Replay a context call",
                ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False),
            ),
            (
                self.forget_subject,
                FORGET_SUBJECT,
                "Forget a subject",
                ToolAnnotations(
                    read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
                ),
            ),
        ]
        return [self._tool(fn, operation, title, hints) for fn, operation, title, hints in specs]

    def _tool(
        self,
        fn: Callable[..., Awaitable[CallToolResult]],
        operation: Operation,
        title: str,
        hints: ToolAnnotations,
    ) -> Tool:
        tool = Tool.from_function(
            fn,
            name=fn.__name__,
            title=title,
            description=inspect.getdoc(fn),
            annotations=hints,
            structured_output=False,
        )
        # The SDK derives no output schema from a CallToolResult; the operation's result schema is
        # published instead, and clients validate every successful result against it.
        metadata = tool.fn_metadata.model_copy(update={"output_schema": self._gateway.output_schema(operation)})
        return tool.model_copy(update={"fn_metadata": metadata})


# The tool only a caller allowed to erase is shown.
ERASING_TOOL = "forget_subject"


class ErasingListedToErasers:
    """Lists forget_subject only to a caller whose key holds the `erase` scope, so a model never
    sees a tool its key cannot use. (A call to it without the scope is refused by GraphQL all the
    same: FORBIDDEN.)"""

    def __init__(self, caller_of: CallerOf) -> None:
        self._caller_of = caller_of

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        result = await call_next(ctx)
        if ctx.method != "tools/list" or not isinstance(result, dict):
            return result
        try:
            allowed = Scope.ERASE in (await self._caller_of(ctx)).caller.scopes
        except Exception:  # no caller (a key revoked meanwhile): nothing to erase with
            allowed = False
        if allowed:
            return result
        return {**result, "tools": [t for t in result.get("tools", []) if t.get("name") != ERASING_TOOL]}


def build_server(
    gateway: Gateway,
    caller_of: CallerOf,
    *,
    lifespan: Callable[[MCPServer[Any]], AbstractAsyncContextManager[Any]] | None = None,
) -> MCPServer[Any]:
    """The MCP server of the memory: its tools, and its resources (a subject's active facts, a trace)."""
    tools = MemoryTools(gateway, caller_of)
    server: MCPServer[Any] = MCPServer(
        "haki-context",
        title="haki-context memory",
        instructions=INSTRUCTIONS,
        version=__version__,
        tools=tools.tools(),
        lifespan=lifespan,
        middleware=[ErasingListedToErasers(caller_of)],
    )

    async def read(operation: Operation, variables: dict[str, Any], ctx: Context[Any, Any]) -> dict[str, Any]:
        try:
            return await gateway.run(operation, variables, await caller_of(ctx.request_context))
        except Exception as exc:
            failure = as_failure(exc)
            if failure is None:
                raise
            raise protocol_error(failure) from None

    @server.resource(
        FACTS_URI,
        name="active_facts",
        title="A subject's active facts",
        description=f"The facts currently in service for a subject (status ACTIVE), newest recorded first, "
        f"at most {FACTS_PAGE * MAX_FACT_PAGES}: each with its id, value, validity and sources. JSON.",
        mime_type="application/json",
    )
    async def active_facts(subject: str, ctx: Context[Any, Any]) -> str:
        facts: list[dict[str, Any]] = []
        after: str | None = None
        for _ in range(MAX_FACT_PAGES):
            page = (await read(ACTIVE_FACTS, {"subject": subject, "after": after}, ctx))["facts"]
            facts += [edge["node"] for edge in page["edges"]]
            after = page["pageInfo"]["endCursor"]
            if not page["pageInfo"]["hasNextPage"]:
                break
        return json_text({"subjectId": subject, "facts": facts})

    @server.resource(
        TRACE_URI,
        name="trace",
        title="A context call's trace",
        description="The persisted trace of one get_context call: every item considered and why it was "
        "included, excluded or blocked, with its scores. JSON.",
        mime_type="application/json",
    )
    async def trace(trace_id: str, ctx: Context[Any, Any]) -> str:
        found = (await read(EXPLAIN, {"id": trace_id}, ctx))["trace"]
        if found is None:
            raise protocol_error(
                OperationFailed(
                    [{"message": f"no trace {trace_id} in this project", "extensions": {"code": "NOT_FOUND"}}]
                )
            )
        return json_text(found)

    return server
