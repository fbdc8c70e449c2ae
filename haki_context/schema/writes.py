"""Holding a response until the traces its `context` fields started writing have committed.

A `context` resolver returns its packet as soon as the trace write is on the wire
(core.context.assembler.start_assembly, core.context.trace_write.TraceWrite), so graphql-core
completes the selection while the database writes; this extension then waits for every such
write before the result leaves execution. A write that failed fails the whole response, as a failing resolver
of the non-null `context` field would: no packet is ever served without its trace.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from graphql import GraphQLError
from strawberry.extensions import SchemaExtension
from strawberry.types.graphql import OperationType

from ..core.serving.consistency import TOKEN_EXTENSION, reads_on_primary, written_position
from ..core.serving.runtime import Runtime


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


class ConsistencyToken(SchemaExtension):
    """The consistency token of an operation that wrote (core/serving/consistency.py), in the
    response's `extensions.consistencyToken` (and, by the HTTP view, its header).

    A mutation's reads stay on the primary (it reads back what it wrote). A query wrote when a
    `context` field persisted its trace: its token is given only where the server has replicas,
    since without them every read is the primary's and the token would protect nothing. Listed
    before AwaitTraceWrites, this extension ends after it: the token is read once the traces
    have committed.
    """

    _token: str | None = None  # set per request: an extension is made for each

    async def on_execute(self) -> AsyncIterator[None]:
        ctx = self.execution_context.context
        rt: Runtime | None = getattr(ctx, "rt", None)
        mutation = self.execution_context.operation_type is OperationType.MUTATION
        if rt is not None and mutation:
            reads_on_primary(rt)
        yield
        result = self.execution_context.result
        if rt is None or result is None or result.data is None:
            return  # nothing ran, or nothing answered: no write to follow
        traced = bool(getattr(ctx, "trace_writes", None)) and rt.replicas is not None
        if mutation or traced:
            # The writes committed: a primary lost just now costs the token, never the answer
            # (the client's next read then goes where it would without one).
            with contextlib.suppress(Exception):
                self._token = await written_position(rt)

    def get_results(self) -> dict[str, Any]:
        return {TOKEN_EXTENSION: self._token} if self._token is not None else {}
