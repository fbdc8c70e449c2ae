"""What the schema tells the metrics and the tracing: each operation's root fields and the codes
of their errors, and each `context` call's trace once written (haki_context/metrics.py,
haki_context/telemetry.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import strawberry
from graphql import DocumentNode, FieldNode, GraphQLError, OperationDefinitionNode
from strawberry.extensions import FieldExtension, SchemaExtension

from .. import metrics, telemetry
from ..core.packet import ContextTrace
from .errors import attached_code, domain_error


class ObserveOperations(SchemaExtension):
    """Counts each operation by root field and outcome, and each error by root field and code."""

    def on_operation(self) -> Iterator[None]:
        try:
            yield
        except GraphQLError as error:  # a parse failure leaves through here, before any result
            self._record([error])
            raise
        except Exception as exc:
            self._record([GraphQLError(str(exc), original_error=exc)])
            raise
        else:
            result = self.execution_context.result
            self._record(
                list((result.errors if result is not None else self.execution_context.pre_execution_errors) or [])
            )

    def _record(self, errors: list[GraphQLError]) -> None:
        context = self.execution_context
        fields = _root_fields(context.graphql_document, context.operation_name)
        if not fields or any(not error.path for error in errors):
            # Refused before any field ran: the document, its validation or its variables.
            metrics.record_refusal([_code(error) for error in errors] or ["INTERNAL"])
            return
        codes: dict[str, str] = {}
        for error in errors:
            field = fields.get(str(error.path[0])) if error.path else None
            if field is not None:
                code = _code(error)
                codes.setdefault(field, code)
                metrics.record_error(field, code)
        metrics.record_operation(fields.values(), codes)


def _root_fields(document: DocumentNode | None, operation_name: str | None) -> dict[str, str]:
    """The operation's root fields by response key (an alias, or the field's name)."""
    if document is None:
        return {}
    for definition in document.definitions:
        if not isinstance(definition, OperationDefinitionNode):
            continue
        if operation_name is not None and (definition.name is None or definition.name.value != operation_name):
            continue
        return {
            (node.alias or node.name).value: node.name.value
            for node in definition.selection_set.selections
            if isinstance(node, FieldNode)
        }
    return {}


def _code(error: GraphQLError) -> str:
    domain = domain_error(error.original_error)
    if domain is not None:
        return domain.code
    return attached_code(error) or "INTERNAL"


class ObserveContext(FieldExtension):
    """On the `context` field: counts its trace (written or failed) and the phases' durations,
    and, with tracing on, makes its spans. Recorded when the trace write ends, by a callback:
    the call waits for nothing more."""

    async def resolve_async(
        self, next_: Callable[..., Awaitable[Any]], source: Any, info: strawberry.Info, **kwargs: Any
    ) -> Any:
        spans = telemetry.start_context_span(kwargs.get("budget"))
        try:
            packet = await next_(source, info, **kwargs)
        except BaseException as exc:
            if spans is not None:
                spans.failed(exc)
            raise
        trace = packet.trace
        pending = info.context.trace_writes.get(trace.id)
        if pending is not None:
            pending.write.when_done(lambda persist_ms: _written(trace, persist_ms, spans))
        return packet


def _written(trace: ContextTrace, persist_ms: float | None, spans: telemetry.ContextSpans | None) -> None:
    metrics.record_trace(trace.timings, persist_ms)
    if spans is not None:
        spans.written(trace.id, trace.timings, persist_ms)
