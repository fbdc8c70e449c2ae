"""Holding a response until the traces its `context` fields started writing have committed.

A `context` resolver returns its packet as soon as the trace write is on the wire
(core.context.assembler.start_assembly, core.context.trace_write.TraceWrite), so graphql-core
completes the selection while the database writes; this extension then waits for every such
write before the result leaves execution. A write that failed fails the whole response, as a failing resolver
of the non-null `context` field would: no packet is ever served without its trace.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from graphql import GraphQLError
from strawberry.extensions import SchemaExtension


class AwaitTraceWrites(SchemaExtension):
    """Waits, after execution, for the request's trace writes (RequestContext.trace_writes)."""

    async def on_execute(self) -> AsyncIterator[None]:
        yield
        writes = getattr(self.execution_context.context, "trace_writes", None)
        if not writes:
            return
        pending = list(writes.values())
        outcomes = await asyncio.gather(*(w.write.committed() for w in pending), return_exceptions=True)
        # A cancelled write (CancelledError is a BaseException, not an Exception) fails the
        # response like any other: graphql-core keeps whatever original_error it is given.
        errors = [
            GraphQLError(str(outcome), path=list(w.path), original_error=outcome)  # type: ignore[arg-type]
            for w, outcome in zip(pending, outcomes)
            if isinstance(outcome, BaseException)
        ]
        if not errors:
            return
        result = self.execution_context.result  # graphql-core's result, returned as it is changed here
        assert result is not None
        result.data = None
        result.errors = [*(result.errors or []), *errors]
        self.execution_context.schema.process_errors(errors, self.execution_context)
