"""Helpers shared by the context tests: write memory, ask for context, read decisions."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from conftest import GraphQLClient

from haki_context.core.serving.runtime import Runtime

FULL_SELECTION = """
  traceId rendered usedTokens budgetTokens status warnings emptyReason
  facts { id predicate value score tokens reasonCode viaEntity sourceEventIds }
  episodes { eventId chunk kind occurredAt excerpt score tokens }
  trace {
    id subjectId query budgetTokens usedTokens status emptyReason warnings createdAt
    timings { embedMs retrieveMs packMs persistMs totalMs }
    counts { included excluded blocked }
    decisions { itemKind itemId chunk decision reasonCode rank score similarity fullText recency distance tokens viaEntity }
  }
"""


async def record(
    client: GraphQLClient, subject: str, texts: list[str], kind: str = "conversation.message"
) -> list[str]:
    data = await client.execute(
        "mutation($i: [EventInput!]!) { recordEvents(inputs: $i) { id } }",
        {"i": [{"subjectId": subject, "kind": kind, "payload": {"speaker": "Ann", "text": t}} for t in texts]},
    )
    return [e["id"] for e in data["recordEvents"]]


async def assert_fact(client: GraphQLClient, subject: str, predicate: str, value: Any, **extra: Any) -> dict[str, Any]:
    data = await client.execute(
        "mutation($i: FactInput!) { assertFact(input: $i) { outcome fact { id } conflict { id } } }",
        {"i": {"subjectId": subject, "predicate": predicate, "value": value, **extra}},
    )
    outcome: dict[str, Any] = data["assertFact"]
    return outcome


async def context(
    client: GraphQLClient, subject: str, query: str, budget: int | None = None, selection: str = FULL_SELECTION
) -> dict[str, Any]:
    """A context call; `budget=None` sends an explicit null, which means the default (900)."""
    data = await client.execute(
        f"query($s: String!, $q: String!, $b: Int) {{ context(subjectId: $s, query: $q, budget: $b) {{ {selection} }} }}",
        {"s": subject, "q": query, "b": budget},
    )
    packet: dict[str, Any] = data["context"]
    return packet


def decisions(packet: dict[str, Any], **match: Any) -> list[dict[str, Any]]:
    rows = packet["trace"]["decisions"]
    return [d for d in rows if all(d.get(k) == v for k, v in match.items())]


def with_settings(rt: Runtime, **changes: Any) -> Runtime:
    """The same pool and embedder with other settings (validated: enum settings may be given as strings)."""
    return replace(rt, settings=rt.settings.model_validate({**rt.settings.model_dump(), **changes}))
