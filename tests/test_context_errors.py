"""Bad arguments to `context` get typed codes."""

from __future__ import annotations

import pytest
from conftest import GraphQLClient

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
