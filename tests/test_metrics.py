"""/metrics: Prometheus text of the process's counters and the app's gauges, behind a key unless
HAKI_METRICS says otherwise; requests and errors by root field and code, each context call's
trace and phases, the restarts the supervisor makes."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from conftest import GraphQLClient, client_for, make_settings, new_project_key
from contextlib_helpers import assert_fact, context
from prometheus_client.parser import text_string_to_metric_families

from haki_context.app import create_app
from haki_context.core.serving.runtime import Runtime
from haki_context.core.serving.supervisor import Supervisor
from haki_context.metrics import RestartLines

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def scrape(http: httpx.AsyncClient, **headers: str) -> Samples:
    response = await http.get("/metrics", headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return parse(response.text)


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture
async def app_client(runtime: Runtime, migrated: str, request: Any) -> AsyncIterator[GraphQLClient]:
    settings = make_settings(migrated, **getattr(request, "param", {}))
    client = client_for(runtime, settings)
    yield client
    await client.http.aclose()


async def test_a_context_call_counts_its_request_its_trace_and_its_phases(client: GraphQLClient, subject: str) -> None:
    await assert_fact(client, subject, "likes", "apples")
    before = await scrape(client.http)
    await context(client, subject, "apples")
    after = await scrape(client.http)

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert grew("haki_graphql_requests_total", operation="context", code="OK") == 1
    assert grew("haki_traces_written_total") == 1 and grew("haki_traces_failed_total") == 0
    for phase in ("embed", "retrieve", "pack", "persist", "total"):
        assert grew("haki_context_phase_seconds_count", phase=phase) == 1, phase
    assert grew("haki_context_phase_seconds_sum", phase="total") > 0
    assert value(after, "haki_database_up") == 1
    assert (
        value(after, "haki_pool_connections", state="idle") + value(after, "haki_pool_connections", state="in_use") >= 1
    )
    assert value(after, "haki_pool_max_connections") == 8
    assert value(after, "haki_subscriptions_open") == 0
    assert value(after, "haki_admission_queue_length") == 0 and value(after, "haki_admission_in_use") == 0
    assert ("haki_database_restarts_total", ()) in after


async def test_errors_are_counted_by_root_field_and_code(client: GraphQLClient, subject: str) -> None:
    before = await scrape(client.http)
    await client.error(
        'query($s: String!) { c: context(subjectId: $s, query: "q", budget: -1) { traceId } }', {"s": subject}
    )
    await client.error("query { context(")
    await client.error("query { stats { contextCalls noSuchField } }")
    after = await scrape(client.http)

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert grew("haki_graphql_requests_total", operation="context", code="BUDGET_EXCEEDED") == 1  # by field, not alias
    assert grew("haki_graphql_errors_total", operation="context", code="BUDGET_EXCEEDED") == 1
    assert grew("haki_graphql_requests_total", operation="none", code="GRAPHQL_PARSE_FAILED") == 1
    assert grew("haki_graphql_requests_total", operation="none", code="GRAPHQL_VALIDATION_FAILED") == 1
    assert grew("haki_graphql_requests_total", operation="stats", code="OK") == 0  # it never ran
    assert grew("haki_traces_written_total") == 0


@pytest.mark.parametrize("app_client", [{"dev_mode": False}], indirect=True)
async def test_metrics_need_a_key_by_default(app_client: GraphQLClient, runtime: Runtime) -> None:
    refused = await app_client.http.get("/metrics")
    assert refused.status_code == 401 and "API key" in refused.text
    before = await scrape(app_client.http, authorization=f"Bearer {await new_project_key(runtime, 'metrics-reader')}")
    await app_client.post("query { stats { contextCalls } }")  # no key: refused before any field
    key = await new_project_key(runtime, "metrics-reader")
    after = await scrape(app_client.http, authorization=f"Bearer {key}")
    grew = value(after, "haki_graphql_requests_total", operation="none", code="UNAUTHENTICATED") - value(
        before, "haki_graphql_requests_total", operation="none", code="UNAUTHENTICATED"
    )
    assert grew == 1


@pytest.mark.parametrize("app_client", [{"dev_mode": False, "metrics": "public"}], indirect=True)
async def test_public_metrics_need_no_key(app_client: GraphQLClient) -> None:
    assert "haki_graphql_requests_total" in (await app_client.http.get("/metrics")).text


@pytest.mark.parametrize("app_client", [{"metrics": "off"}], indirect=True)
async def test_metrics_off_is_not_found(app_client: GraphQLClient) -> None:
    assert (await app_client.http.get("/metrics")).status_code == 404


class _StoppedServer:
    """What the supervisor asks of an embedded server that has just stopped."""

    def postmaster_pid(self) -> int:
        return 4242


async def test_a_restart_the_supervisor_announces_is_counted(client: GraphQLClient, runtime: Runtime) -> None:
    before = value(await scrape(client.http), "haki_database_restarts_total")
    counter = RestartLines()
    logger = logging.getLogger("haki_context.supervisor")
    logger.addFilter(counter)
    try:
        supervisor = Supervisor(_StoppedServer(), runtime.pool, 1.0)  # type: ignore[arg-type]
        supervisor._lost(alive=False)  # the line it logs when the postmaster is gone and it restarts it
        supervisor._lost(alive=True)  # a database that does not answer is waited for, not restarted
    finally:
        logger.removeFilter(counter)
    assert value(await scrape(client.http), "haki_database_restarts_total") - before == 1


def test_the_metrics_app_is_built_with_the_route_only_when_asked(migrated: str) -> None:
    paths = {getattr(r, "path", None) for r in create_app(make_settings(migrated, metrics="off")).routes}
    assert "/metrics" not in paths
    paths = {getattr(r, "path", None) for r in create_app(make_settings(migrated)).routes}
    assert "/metrics" in paths
