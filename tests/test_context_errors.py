"""Bad arguments to `context` get typed codes."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest
from conftest import GraphQLClient
from contextlib_helpers import assert_fact

from haki_context.core.serving.runtime import Runtime
from haki_context.db import retrieval

QUERY = "query($s: String!, $q: String!, $b: Int) { context(subjectId: $s, query: $q, budget: $b) { traceId } }"


@pytest.mark.parametrize("budget", [0, -1, 100_001])
async def test_budget_outside_its_range_is_budget_exceeded(client: GraphQLClient, subject: str, budget: int) -> None:
    error = await client.error(QUERY, {"s": subject, "q": "hello", "b": budget})
    assert error["extensions"]["code"] == "BUDGET_EXCEEDED"


@pytest.mark.parametrize("query", ["", "   ", "\x00", "x" * 4001])
async def test_blank_or_too_long_query_is_invalid_input(client: GraphQLClient, subject: str, query: str) -> None:
    error = await client.error(QUERY, {"s": subject, "q": query, "b": None})
    assert error["extensions"]["code"] == "INVALID_INPUT"


@pytest.mark.parametrize("subject_id", ["", "s" * 129])
async def test_subject_outside_1_to_128_characters_is_invalid_input(client: GraphQLClient, subject_id: str) -> None:
    error = await client.error(QUERY, {"s": subject_id, "q": "hello", "b": None})
    assert error["extensions"]["code"] == "INVALID_INPUT"


async def test_limits_themselves_are_accepted(client: GraphQLClient) -> None:
    data = await client.execute(QUERY, {"s": "s" * 128, "q": "q" * 4000, "b": 100_000})
    assert data["context"]["traceId"]


async def test_a_failed_statement_fails_the_call_after_the_others_finish(
    runtime: Runtime, client: GraphQLClient, subject: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await assert_fact(client, subject, "a", "alpha")

    episode_candidates = retrieval.episode_candidates
    finished: list[bool] = []

    async def slow_episodes(conn: Any, *args: Any) -> Any:
        await asyncio.sleep(0.2)  # holding its connection
        result = await episode_candidates(conn, *args)
        finished.append(True)
        return result

    async def refused(*args: Any) -> retrieval.FactCandidates:
        raise RuntimeError("facts refused")  # while the episode statement still runs

    monkeypatch.setattr(
        retrieval, "LIVE", replace(retrieval.LIVE, fact_candidates=refused, episode_candidates=slow_episodes)
    )
    error = await client.error(QUERY, {"s": subject, "q": "alpha", "b": None})
    assert error["extensions"]["code"] == "INTERNAL"
    # The episode statement was awaited before the error left the call: no connection is still busy.
    assert finished == [True]
    assert runtime.pool.get_idle_size() == runtime.pool.get_size()
    async with runtime.pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM context_traces WHERE subject_id = $1", subject) == 0
