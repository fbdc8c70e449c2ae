"""Prometheus metrics of the server process, served at /metrics (docs/operations.md "Metrics").

Counters and histograms are made once, at import, with their label values bound ahead where
the set is closed (the phases), so that recording a call is a few increments: nothing is
allocated per call beyond what prometheus-client does for a label lookup. The gauges (pool,
database, subscriptions, admission) are read from the app when scraped, never kept up to date
on the hot path.

The figures are the process's, across every project: a scrape shows how the server is doing,
not what any tenant stored.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterable, Iterator
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector
from starlette.datastructures import State
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from .core.errors import HakiError
from .core.serving.auth import authorization_of
from .core.serving.replicas import ReplicaSet, ReplicaState
from .settings import MetricsAccess

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# prometheus-client's own variable: where the processes of one server keep their counters. Read
# by prometheus-client when it is first imported, so set before a worker starts.
MULTIPROCESS_DIR = "PROMETHEUS_MULTIPROC_DIR"


REGISTRY = CollectorRegistry(auto_describe=True)

REQUESTS = Counter(
    "haki_graphql_requests",
    "GraphQL operations by root field and outcome (OK, or the code of the first error under that field; "
    "operation `none` for a request refused before any field ran).",
    ["operation", "code"],
    registry=REGISTRY,
)
ERRORS = Counter(
    "haki_graphql_errors", "GraphQL errors by root field and code.", ["operation", "code"], registry=REGISTRY
)
# Milliseconds from 1 to 10,000 on a roughly 2-2.5-5 ladder, in seconds as Prometheus counts time.
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
CONTEXT_PHASES = Histogram(
    "haki_context_phase_seconds",
    "Duration of each phase of a context call, as its trace records it "
    "(embed, retrieve, pack, persist; total is the whole call, trace write included).",
    ["phase"],
    buckets=_LATENCY_BUCKETS,
    registry=REGISTRY,
)
PHASE = {name: CONTEXT_PHASES.labels(name) for name in ("embed", "retrieve", "pack", "persist", "total")}
TRACES_WRITTEN = Counter("haki_traces_written", "Context traces written (committed).", registry=REGISTRY)
TRACES_FAILED = Counter(
    "haki_traces_failed", "Context traces whose write failed (their call failed with them).", registry=REGISTRY
)
DATABASE_RESTARTS = Counter(
    "haki_database_restarts",
    "Restarts of the embedded PostgreSQL by this process's supervisor after it stopped.",
    registry=REGISTRY,
)


class PhaseTimings(Protocol):
    """What record_trace reads of a trace's timings (core.packet.TraceTimings), in ms."""

    @property
    def embed_ms(self) -> float: ...
    @property
    def retrieve_ms(self) -> float: ...
    @property
    def pack_ms(self) -> float: ...
    @property
    def total_ms(self) -> float: ...


def record_trace(timings: PhaseTimings, persist_ms: float | None) -> None:
    """Count one context call's trace: written with its phases' durations, or failed (None)."""
    if persist_ms is None:
        TRACES_FAILED.inc()
        return
    TRACES_WRITTEN.inc()
    PHASE["embed"].observe(timings.embed_ms / 1000.0)
    PHASE["retrieve"].observe(timings.retrieve_ms / 1000.0)
    PHASE["pack"].observe(timings.pack_ms / 1000.0)
    PHASE["persist"].observe(persist_ms / 1000.0)
    PHASE["total"].observe((timings.total_ms + persist_ms) / 1000.0)


def record_operation(fields: Iterable[str], codes: dict[str, str]) -> None:
    """Count one operation's root fields, each OK or with its first error's code (`codes`)."""
    for field in fields:
        REQUESTS.labels(field, codes.get(field, "OK")).inc()


def record_refusal(codes: list[str]) -> None:
    """Count a request refused before any field ran (its key, body, document or variables), by
    its first error's code, and each of its errors."""
    REQUESTS.labels("none", codes[0]).inc()
    for code in codes:
        ERRORS.labels("none", code).inc()


def record_error(operation: str, code: str) -> None:
    """Count one error of a root field."""
    ERRORS.labels(operation, code).inc()


class RestartLines(logging.Filter):
    """Counts the supervisor's restarts from its own line ("... stopped (pid N); restarting it"):
    the supervisor says when it restarts, and the count follows what it says."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.WARNING and "restarting it" in str(record.msg):
            DATABASE_RESTARTS.inc()
        return True


class _AppGauges(Collector):
    """The gauges read from one app's state when scraped."""

    def __init__(self, state: State, database_up: bool | None) -> None:
        self._state = state
        self._database_up = database_up

    def collect(self) -> Iterator[Metric]:
        rt = getattr(self._state, "runtime", None)
        pool = GaugeMetricFamily(
            "haki_pool_connections", "Database connections of the pool, by state.", labels=["state"]
        )
        if rt is not None:
            idle = rt.pool.get_idle_size()
            pool.add_metric(["in_use"], rt.pool.get_size() - idle)
            pool.add_metric(["idle"], idle)
            yield GaugeMetricFamily("haki_pool_max_connections", "The pool's most connections.", rt.pool.get_max_size())
        yield pool
        if self._database_up is not None:
            yield GaugeMetricFamily("haki_database_up", "1 when the database answers, else 0.", int(self._database_up))
        live = getattr(self._state, "live", None)
        if live is not None:
            yield GaugeMetricFamily("haki_subscriptions_open", "traceAdded subscriptions open.", live.open)
            yield CounterMetricFamily(
                "haki_live_reconnects",
                "Times the listening connection was made again after it was lost.",
                live.reconnects,
            )
        if rt is not None:
            yield GaugeMetricFamily(
                "haki_admission_in_use", "Context calls holding an admission slot.", rt.admission.in_use
            )
            yield GaugeMetricFamily(
                "haki_admission_slots", "Admission slots (HAKI_MAX_CONCURRENT_CONTEXT).", rt.admission.slots
            )
            yield GaugeMetricFamily(
                "haki_admission_queue_length", "Context calls waiting for an admission slot.", rt.admission.waiting
            )
        if rt is not None and rt.replicas is not None:
            yield from _replica_metrics(rt.replicas)


def _replica_metrics(replicas: ReplicaSet) -> Iterator[Metric]:
    """Each replica's state and lag as this process last checked it, and where reads went."""
    up = GaugeMetricFamily("haki_replica_up", "1 while the replica serves reads (healthy), else 0.", labels=["replica"])
    state = GaugeMetricFamily(
        "haki_replica_state",
        "The replica's state at its last check: 1 for the state it is in.",
        labels=["replica", "state"],
    )
    lag = GaugeMetricFamily(
        "haki_replica_lag_seconds",
        "The replica's replay lag at its last check (absent while it is down).",
        labels=["replica"],
    )
    reads = CounterMetricFamily(
        "haki_reads",
        "Read statements of this process by where they ran (a replica, or the primary).",
        labels=["target"],
    )
    for view in replicas.views():
        up.add_metric([view.target], int(view.state is ReplicaState.HEALTHY))
        for each in ReplicaState:
            state.add_metric([view.target, each.value], int(view.state is each))
        if view.lag_ms is not None:
            lag.add_metric([view.target], view.lag_ms / 1000.0)
        reads.add_metric([view.target], view.reads)
    reads.add_metric(["primary"], replicas.primary_reads)
    waits = CounterMetricFamily(
        "haki_consistency_waits",
        "Requests with a consistency token by where they were served once the replicas were asked.",
        labels=["outcome"],
    )
    waits.add_metric(["replica"], replicas.waits)
    waits.add_metric(["primary"], replicas.wait_fallbacks)
    yield from (up, state, lag, reads, waits)


async def _database_up(state: State) -> bool | None:
    """What /readyz says of the database: the supervisor's state, else a ping within 1 s."""
    rt = getattr(state, "runtime", None)
    if rt is None:
        return None
    supervisor = getattr(state, "supervisor", None)
    if supervisor is not None and not supervisor.up:
        return False
    try:
        async with asyncio.timeout(1.0):
            async with rt.pool.acquire() as conn:
                await conn.fetchval("SELECT 1")
    except Exception:  # any failure means down
        return False
    return True


def exposition(state: State, database_up: bool | None) -> bytes:
    """The Prometheus text of the counters and `state`'s gauges.

    Under several workers (PROMETHEUS_MULTIPROC_DIR, set by their parent: workers.py) each
    process writes its counters and histograms to files there, and a scrape, answered by one
    worker, sums every worker's; the gauges are the answering process's own."""
    gauges = CollectorRegistry(auto_describe=False)
    gauges.register(_AppGauges(state, database_up))
    return _counters() + generate_latest(gauges)


def _counters() -> bytes:
    shared = os.environ.get(MULTIPROCESS_DIR)
    if not shared:
        return generate_latest(REGISTRY)
    every_process = CollectorRegistry()
    MultiProcessCollector(every_process, path=shared)  # type: ignore[no-untyped-call]
    return generate_latest(every_process)


class MetricsEndpoint:
    """GET /metrics, behind an API key unless HAKI_METRICS=public."""

    def __init__(self, access: MetricsAccess) -> None:
        self._access = access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        await (await self._answer(request))(scope, receive, send)

    async def _answer(self, request: Request) -> Response:
        if self._access is MetricsAccess.KEY:
            try:
                authorization = authorization_of(request.headers.getlist("authorization"))
                await request.app.state.authenticator.caller_for(authorization)
            except HakiError as exc:
                return Response(exc.message + "\n", status_code=exc.http_status, media_type="text/plain")
        body = exposition(request.app.state, await _database_up(request.app.state))
        return Response(body, media_type=CONTENT_TYPE)
