"""Optional OpenTelemetry spans (docs/operations.md "Tracing"): off by default.

With HAKI_OTEL_EXPORTER=otlp, each HTTP request to /graphql, /mcp or /export is a span (a
child of the caller's own span when it sends a W3C `traceparent`), and each `context` call
within it a span with the packet's trace id (`haki.trace_id`) and one child per phase
(embed, retrieve, pack, persist). The exporter is the SDK's OTLP one, configured by the
standard OTEL_* variables (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_SERVICE_NAME, ...).

The SDK and the exporter are the `[otel]` extra, imported only when tracing is on: a server
without them, or with tracing off, pays one `is None` test per call.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Protocol

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .settings import OtelExporter

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span, Tracer


# The process's tracer while tracing is on (configure); None otherwise.
_tracer: Tracer | None = None
_provider: TracerProvider | None = None
TRACED_PATHS = ("/graphql", "/mcp", "/export")


def configure(exporter: OtelExporter, *, span_exporter: SpanExporter | None = None) -> None:
    """Turn tracing on for `exporter` (or off for NONE). `span_exporter` replaces the OTLP one
    (tests pass the SDK's in-memory exporter, whose spans are exported as they end)."""
    global _tracer, _provider
    shutdown()
    if exporter is OtelExporter.NONE and span_exporter is None:
        return
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    except ImportError as exc:
        raise RuntimeError(
            "HAKI_OTEL_EXPORTER=otlp needs the OpenTelemetry SDK: pip install 'haki-context[otel]'"
        ) from exc
    # The service is named haki-context unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES names it.
    named = "OTEL_SERVICE_NAME" in os.environ or "service.name" in os.environ.get("OTEL_RESOURCE_ATTRIBUTES", "")
    provider = TracerProvider(resource=Resource.create({} if named else {"service.name": "haki-context"}))
    if span_exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(span_exporter))
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    _provider, _tracer = provider, provider.get_tracer("haki_context")


def shutdown() -> None:
    """Flush and stop tracing (the server's stop)."""
    global _tracer, _provider
    if _provider is not None:
        _provider.shutdown()
    _tracer, _provider = None, None


def tracer() -> Tracer | None:
    """The tracer while tracing is on."""
    return _tracer


class PhaseTimings(Protocol):
    """What ContextSpans.written reads of a trace's timings (core.packet.TraceTimings), in ms."""

    @property
    def embed_ms(self) -> float: ...
    @property
    def retrieve_ms(self) -> float: ...
    @property
    def pack_ms(self) -> float: ...


class ContextSpans:
    """The spans of one `context` call: opened when the call starts, its phases added from the
    trace's timings once the trace is written (they are laid end to end from the call's start:
    the trace records how long each phase took, and pack partly overlaps retrieve)."""

    __slots__ = ("_span", "_start_ns")

    def __init__(self, span: Span) -> None:
        self._span = span
        self._start_ns = time.time_ns()

    def written(self, trace_id: str, timings: PhaseTimings, persist_ms: float | None) -> None:
        """End the call's span, with its phases' children (None: the write failed)."""
        from opentelemetry import trace
        from opentelemetry.trace import Status, StatusCode

        span, tracer_ = self._span, _tracer
        span.set_attribute("haki.trace_id", trace_id)
        if tracer_ is not None:
            parent = trace.set_span_in_context(span)
            at = self._start_ns
            phases = [("embed", timings.embed_ms), ("retrieve", timings.retrieve_ms), ("pack", timings.pack_ms)]
            if persist_ms is not None:
                phases.append(("persist", persist_ms))
            for name, ms in phases:
                end = at + int(ms * 1_000_000)
                child = tracer_.start_span(f"context.{name}", context=parent, start_time=at)
                child.set_attribute("haki.trace_id", trace_id)
                child.end(end_time=end)
                at = end
        if persist_ms is None:
            span.set_status(Status(StatusCode.ERROR, "the trace write failed"))
        span.end()

    def failed(self, exc: BaseException) -> None:
        """End the call's span with the error that ended the call before its trace was sent."""
        from opentelemetry.trace import Status, StatusCode

        self._span.record_exception(exc)
        self._span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
        self._span.end()


def start_context_span(budget: int | None) -> ContextSpans | None:
    """The spans of a `context` call starting now, as a child of the current span (None: off)."""
    if _tracer is None:
        return None
    span = _tracer.start_span("context")
    if budget is not None:
        span.set_attribute("haki.budget", budget)
    return ContextSpans(span)


class TracingMiddleware:
    """A span per HTTP request to the API paths, current while the request runs (so a `context`
    call's span is its child), continuing the caller's trace from its `traceparent` header."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        tracer_ = _tracer
        if tracer_ is None or scope["type"] != "http" or scope["path"] not in TRACED_PATHS:
            await self.app(scope, receive, send)
            return
        from opentelemetry import context as otel_context
        from opentelemetry.propagate import extract
        from opentelemetry.trace import SpanKind

        carrier = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        status: dict[str, int] = {}

        async def send_status(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        parent = extract(carrier)
        token = otel_context.attach(parent)
        try:
            with tracer_.start_as_current_span(f"{scope['method']} {scope['path']}", kind=SpanKind.SERVER) as span:
                span.set_attribute("http.request.method", scope["method"])
                span.set_attribute("url.path", scope["path"])
                await self.app(scope, receive, send_status)
                if "code" in status:
                    span.set_attribute("http.response.status_code", status["code"])
        finally:
            otel_context.detach(token)
