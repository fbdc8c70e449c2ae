"""Property-based fuzz of the GraphQL API: operations generated from the committed schema.graphql.

hypothesis-graphql builds queries and mutations of the schema with generated arguments and
selections; each goes through the HTTP endpoint (ASGI transport, the hashing embedder) with
its subject and id arguments aimed, half the time, at a fresh subject that holds events and
facts. A response fails on any HTTP 5xx but a deliberate 503 UNAVAILABLE, any INTERNAL error,
an error without a code, or a leak (a traceback, SQL text, a filesystem path). The examples
are derandomized, so CI runs the same ones every time; `python -m benchmarks.fuzz` is the long run.
"""

from __future__ import annotations

import random
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import graphql
import httpx
import pytest
from conftest import client_for
from contextlib_helpers import assert_fact, record
from hypothesis import HealthCheck, given, settings

from haki_context.core.serving.runtime import Runtime

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))  # benchmarks/ is a folder of the repository, not an installed package

from benchmarks.fuzz import aim, judge, operations  # noqa: E402

FUZZ = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
)


class Target:
    """The app under fuzz and the subject and ids that exist in it."""

    def __init__(self, http: httpx.AsyncClient, subject: str, ids: list[str]) -> None:
        self.http, self.subject, self.ids = http, subject, ids
        self.rng = random.Random(0)

    async def send(self, doc: graphql.DocumentNode) -> None:
        text = aim(doc, self.subject, self.ids, self.rng)
        response = await self.http.post("/graphql", json={"query": text})
        failures = judge(text, response.status_code, response.content)
        assert not failures, f"{failures[0][0]} for\n{text}\n-> {response.status_code} {failures[0][1]}"


@pytest.fixture(scope="module")
async def target(runtime: Runtime) -> AsyncIterator[Target]:
    client = client_for(runtime)
    subject = f"fuzz-{uuid.uuid4().hex[:12]}"
    event_ids = await record(client, subject, ["Ann moved to Lisbon.", "Ann prefers tea."])
    facts = [await assert_fact(client, subject, p, v, mode="ADD") for p, v in (("city", "Lisbon"), ("drink", "tea"))]
    ids = event_ids + [f["fact"]["id"] for f in facts] + [str(uuid.uuid4())]
    yield Target(client.http, subject, ids)
    await client.http.aclose()


@FUZZ
@given(doc=operations(kind="query"))
async def test_generated_queries_never_fail_internally(target: Target, doc: graphql.DocumentNode) -> None:
    await target.send(doc)


@FUZZ
@given(doc=operations(kind="mutation"))
async def test_generated_mutations_never_fail_internally(target: Target, doc: graphql.DocumentNode) -> None:
    await target.send(doc)
