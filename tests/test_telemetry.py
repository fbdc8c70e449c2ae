"""OpenTelemetry spans, with the SDK's in-memory exporter: a span per API request continuing the
caller's `traceparent`, a `context` span carrying the packet's trace id, one child per phase."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from conftest import GraphQLClient
from contextlib_helpers import assert_fact, context
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from haki_context import telemetry
from haki_context.settings import OtelExporter, Settings

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    telemetry.configure(OtelExporter.NONE, span_exporter=exporter)
    yield exporter
    telemetry.shutdown()


async def test_a_context_call_is_a_span_with_its_trace_id_and_its_phases(
    spans: InMemorySpanExporter, client: GraphQLClient, subject: str
) -> None:
    await assert_fact(client, subject, "likes", "apples")
    spans.clear()
    response = await client.http.post(
        "/graphql",
        json={
            "query": 'query($s: String!) { context(subjectId: $s, query: "apples") { traceId } }',
            "variables": {"s": subject},
        },
        headers={"traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"},
    )
    trace_id = response.json()["data"]["context"]["traceId"]
    finished = {s.name: s for s in spans.get_finished_spans()}
    assert set(finished) == {
        "POST /graphql",
        "context",
        "context.embed",
        "context.retrieve",
        "context.pack",
        "context.persist",
    }
    request, call = finished["POST /graphql"], finished["context"]
    assert format(request.context.trace_id, "032x") == CALLER_TRACE  # the agent's own trace goes on here
    assert request.parent is not None and format(request.parent.span_id, "016x") == CALLER_SPAN
    assert request.attributes is not None and request.attributes["http.response.status_code"] == 200
    assert call.parent is not None and call.parent.span_id == request.context.span_id
    assert call.attributes is not None and call.attributes["haki.trace_id"] == trace_id
    for phase in ("embed", "retrieve", "pack", "persist"):
        child = finished[f"context.{phase}"]
        assert child.parent is not None and child.parent.span_id == call.context.span_id
        assert child.attributes is not None and child.attributes["haki.trace_id"] == trace_id
        assert child.start_time is not None and child.end_time is not None and child.start_time <= child.end_time
    assert call.status.is_ok


async def test_a_refused_context_call_ends_its_span_with_an_error(
    spans: InMemorySpanExporter, client: GraphQLClient, subject: str
) -> None:
    await client.error(
        'query($s: String!) { context(subjectId: $s, query: "q", budget: -1) { traceId } }', {"s": subject}
    )
    finished = {s.name: s for s in spans.get_finished_spans()}
    assert not finished["context"].status.is_ok and "context.persist" not in finished
    assert finished["POST /graphql"].attributes is not None


async def test_no_span_is_made_while_tracing_is_off(client: GraphQLClient, subject: str) -> None:
    exporter = InMemorySpanExporter()  # not configured: tracing stays off
    await context(client, subject, "anything", selection="traceId")
    assert telemetry.tracer() is None and not exporter.get_finished_spans()


def test_tracing_is_off_by_default() -> None:
    assert Settings().otel_exporter is OtelExporter.NONE
