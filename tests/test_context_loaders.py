"""DataLoaders: a packet of 30 facts with source events costs one query for all the events."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

import asyncpg
import pytest
from conftest import GraphQLClient, client_for
from contextlib_helpers import assert_fact, record

from haki_context.core.runtime import Runtime
from haki_context.db.pool import init_connection, keep_session


class StatementLog:
    def __init__(self) -> None:
        self.statements: list[str] = []

    def __call__(self, record: asyncpg.connection.LoggedQuery) -> None:
        self.statements.append(record.query)

    def matching(self, text: str) -> list[str]:
        return [s for s in self.statements if text in s]

    def round_trips(self) -> list[str]:
        """Statements of the call itself: asyncpg's one-off type introspection of a new connection left out."""
        return [s for s in self.statements if "typeinfo" not in s and "set_config('jit'" not in s
                and "current_setting('jit')" not in s]


@pytest.fixture
async def logged(runtime: Runtime, migrated: str) -> AsyncIterator[tuple[GraphQLClient, StatementLog]]:
    log = StatementLog()

    async def init(conn: asyncpg.Connection) -> None:
        await init_connection(conn)
        conn.add_query_logger(log)

    pool = await asyncpg.create_pool(migrated, min_size=1, max_size=4, init=init, reset=keep_session)
    client = client_for(replace(runtime, pool=pool))
    yield client, log
    await client.http.aclose()
    await pool.close()


async def test_thirty_facts_load_their_source_events_in_one_query(
    logged: tuple[GraphQLClient, StatementLog], subject: str
) -> None:
    client, log = logged
    events = await record(client, subject, [f"event {i}" for i in range(30)])
    for i in range(30):
        await assert_fact(client, subject, f"p{i}", f"value {i}", sourceEventIds=[events[i], events[(i + 1) % 30]])
    log.statements.clear()
    data = await client.execute(
        "query($s: String!) { context(subjectId: $s, query: \"value\", budget: 5000) {"
        " facts { id sourceEvents { id kind } fact { id status } }"
        " episodes { eventId event { id kind } }"
        " trace { decisions { itemKind fact { predicate } event { id } } } } }",
        {"s": subject},
    )
    facts = data["context"]["facts"]
    assert len(facts) == 30 and all(len(f["sourceEvents"]) == 2 for f in facts)
    event_reads = log.matching("FROM events WHERE project_id = $1 AND id = ANY")
    fact_reads = log.matching("FROM facts WHERE project_id = $1 AND id = ANY")
    assert len(event_reads) == 1  # sourceEvents, Episode.event and TraceDecision.event together
    assert len(fact_reads) == 1  # PacketFact.fact and TraceDecision.fact together
    assert len(log.matching("FROM trace_decisions")) == 0  # the packet's own decisions are in hand
    # candidates, episodes, BEGIN + trace + timing + COMMIT, one facts batch, one events batch
    assert len(log.round_trips()) == 8, log.round_trips()
