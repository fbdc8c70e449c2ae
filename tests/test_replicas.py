"""Read replicas against a real streaming standby of the session's PostgreSQL: where reads and
writes go, health and lag, consistency tokens (read-your-writes) and a replica lost mid-call.

The standby is shared by the session: a test that pauses its replay resumes it before it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import httpx
import pytest
from conftest import GraphQLClient, make_settings

from haki_context.app import create_app, open_runtime
from haki_context.core.serving.auth import Caller
from haki_context.core.serving.consistency import TOKEN_HEADER, format_token, parse_token
from haki_context.core.serving.replicas import ReplicaState
from haki_context.core.serving.runtime import Runtime
from haki_context.db.replication import lost_server
from haki_context.mcp_server.gateway import Gateway, Invocation
from haki_context.mcp_server.operations import GET_CONTEXT, REMEMBER
from haki_context.schema import schema_for

RECORD = "mutation($input: EventInput!) { recordEvent(input: $input) { id } }"
EVENTS = "query($s: String!) { events(subjectId: $s) { edges { node { id } } } }"
CONTEXT = "query($s: String!, $q: String!) { context(subjectId: $s, query: $q, budget: 900) { rendered trace { id } } }"
TOKEN_FORM = re.compile(r"[0-9A-F]{1,8}/[0-9A-F]{1,8}")


@contextlib.asynccontextmanager
async def replica_runtime(migrated: str, standby_uri: str, **overrides: Any) -> AsyncIterator[Runtime]:
    """A runtime opened as `serve` opens it, with the standby as its one replica."""
    settings = make_settings(
        migrated, replica_urls=(standby_uri,), database_check_interval_s=0.1, scope_index_interval_s=0, **overrides
    )
    rt, stack = await open_runtime(settings)
    async with stack:
        yield rt


@contextlib.asynccontextmanager
async def client_of(rt: Runtime) -> AsyncIterator[GraphQLClient]:
    app = create_app(rt.settings, runtime=rt)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver") as http:
        yield GraphQLClient(http)


@contextlib.asynccontextmanager
async def replay_paused(standby_uri: str) -> AsyncIterator[asyncpg.Connection]:
    """The standby with its replay paused (it still receives the log), resumed on the way out."""
    conn = await asyncpg.connect(standby_uri)
    try:
        await conn.execute("SELECT pg_wal_replay_pause()")
        while await conn.fetchval("SELECT pg_get_wal_replay_pause_state()") != "paused":
            await asyncio.sleep(0.01)
        yield conn
    finally:
        await conn.execute("SELECT pg_wal_replay_resume()")
        await conn.close()


async def until(check: Callable[[], Awaitable[bool]], timeout_s: float = 10.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not await check():
            await asyncio.sleep(0.02)


async def event_ids(client: GraphQLClient, subject: str, **headers: str) -> list[str]:
    data = await client.execute(EVENTS, {"s": subject}, **headers)
    return [edge["node"]["id"] for edge in data["events"]["edges"]]


async def record(client: GraphQLClient, subject: str, text: str) -> tuple[str, str]:
    """Record one turn; its id and the response's consistency token."""
    response = await client.post(
        RECORD, {"input": {"subjectId": subject, "kind": "conversation.message", "payload": {"text": text}}}
    )
    body = response.json()
    assert not body.get("errors"), body
    token = response.headers[TOKEN_HEADER]
    assert body["extensions"]["consistencyToken"] == token
    return body["data"]["recordEvent"]["id"], token


def test_a_token_is_written_as_postgresql_writes_a_log_position() -> None:
    position = (1 << 32) | 0x16B3748
    assert format_token(position) == "1/16B3748"
    assert parse_token("1/16B3748") == position
    assert parse_token(" 0/ff ") == 0xFF
    assert parse_token(None) is None


async def test_a_malformed_token_is_refused_as_invalid_input(migrated: str, standby_uri: str) -> None:
    async with replica_runtime(migrated, standby_uri) as rt, client_of(rt) as client:
        response = await client.post(EVENTS, {"s": "someone"}, **{TOKEN_HEADER: "not-a-position"})
        assert response.status_code == 400
        error = response.json()["errors"][0]
        assert error["extensions"]["code"] == "INVALID_INPUT"
        assert TOKEN_HEADER in error["message"]


async def test_reads_go_to_the_replica_and_writes_to_the_primary(migrated: str, standby_uri: str, subject: str) -> None:
    async with replica_runtime(migrated, standby_uri) as rt, client_of(rt) as client:
        replicas = rt.replicas
        assert replicas is not None and replicas.replicas[0].state is ReplicaState.HEALTHY
        event_id, token = await record(client, subject, "the invoice goes to Lyon")
        assert TOKEN_FORM.fullmatch(token)
        before = (replicas.replicas[0].reads, replicas.primary_reads)

        async def replicated() -> bool:
            return event_id in await event_ids(client, subject)

        await until(replicated)
        assert replicas.replicas[0].reads > before[0]
        assert replicas.primary_reads == before[1]  # reads without a token never touched the primary
        # The write went to the primary: the standby could not have taken it.
        primary = await asyncpg.connect(migrated)
        try:
            assert await primary.fetchval("SELECT count(*) FROM events WHERE id = $1::uuid", event_id) == 1
        finally:
            await primary.close()


async def test_with_its_token_a_read_sees_its_write_on_a_paused_replica_every_time(
    migrated: str, standby_uri: str, subject: str
) -> None:
    # A lag bound far above the pause: the paused replica stays healthy, so a read without the
    # token is served stale by it, which shows that the token is what makes the read current.
    async with (
        replica_runtime(migrated, standby_uri, replica_max_lag_ms=3_600_000, replica_wait_ms=50) as rt,
        client_of(rt) as client,
    ):
        replicas = rt.replicas
        assert replicas is not None
        async with replay_paused(standby_uri):
            stale_reads = 0
            for n in range(5):
                event_id, token = await record(client, subject, f"turn {n} of the paused replica")
                assert event_id in await event_ids(client, subject, **{TOKEN_HEADER: token})
                stale_reads += event_id not in await event_ids(client, subject)
            assert stale_reads == 5  # without the token, the paused replica answered each time
            assert replicas.wait_fallbacks >= 5  # the replica never got there: the primary served


async def test_a_context_call_with_the_token_sees_the_turn_just_recorded(
    migrated: str, standby_uri: str, subject: str
) -> None:
    async with (
        replica_runtime(migrated, standby_uri, replica_max_lag_ms=3_600_000, replica_wait_ms=50) as rt,
        client_of(rt) as client,
        replay_paused(standby_uri),
    ):
        text = "my daughter's recital is on the ninth of May"
        _, token = await record(client, subject, text)
        seen = await client.execute(CONTEXT, {"s": subject, "q": text}, **{TOKEN_HEADER: token})
        assert text in seen["context"]["rendered"]
        stale = await client.execute(CONTEXT, {"s": subject, "q": text})
        assert text not in stale["context"]["rendered"]


async def test_a_token_is_waited_for_while_the_replica_catches_up(
    migrated: str, standby_uri: str, subject: str
) -> None:
    async with (
        replica_runtime(migrated, standby_uri, replica_max_lag_ms=3_600_000, replica_wait_ms=5_000) as rt,
        client_of(rt) as client,
    ):
        replicas = rt.replicas
        assert replicas is not None
        async with replay_paused(standby_uri) as standby:
            event_id, token = await record(client, subject, "written while the replica waits")
            waits, fallbacks = replicas.waits, replicas.wait_fallbacks

            async def resume_soon() -> None:
                await asyncio.sleep(0.2)
                await standby.execute("SELECT pg_wal_replay_resume()")

            resumed = asyncio.create_task(resume_soon())
            assert event_id in await event_ids(client, subject, **{TOKEN_HEADER: token})
            await resumed
        assert (replicas.waits, replicas.wait_fallbacks) == (waits + 1, fallbacks)  # served by the replica


async def test_a_mutation_reads_back_what_it_wrote_from_the_primary(
    migrated: str, standby_uri: str, subject: str
) -> None:
    assert_fact = "mutation($input: FactInput!) { assertFact(input: $input) { fact { id sourceEvents { id } } } }"
    async with (
        replica_runtime(migrated, standby_uri, replica_max_lag_ms=3_600_000) as rt,
        client_of(rt) as client,
        replay_paused(standby_uri),
    ):
        event_id, _ = await record(client, subject, "I moved to Lyon")
        fact = {"subjectId": subject, "predicate": "home city", "value": "Lyon", "sourceEventIds": [event_id]}
        data = await client.execute(assert_fact, {"input": fact})
        assert [e["id"] for e in data["assertFact"]["fact"]["sourceEvents"]] == [event_id]


async def test_a_context_call_gives_a_token_for_its_trace_where_replicas_serve(
    migrated: str, standby_uri: str, subject: str
) -> None:
    async with (
        replica_runtime(migrated, standby_uri, replica_max_lag_ms=3_600_000, replica_wait_ms=50) as rt,
        client_of(rt) as client,
        replay_paused(standby_uri),
    ):
        await record(client, subject, "a turn to find")
        response = await client.post(CONTEXT, {"s": subject, "q": "a turn to find"})
        token = response.headers[TOKEN_HEADER]
        trace_id = response.json()["data"]["context"]["trace"]["id"]
        trace = "query($id: ID!) { trace(id: $id) { id } }"
        assert (await client.execute(trace, {"id": trace_id}, **{TOKEN_HEADER: token}))["trace"] == {"id": trace_id}
        assert (await client.execute(trace, {"id": trace_id}))["trace"] is None  # stale without it


async def test_a_replica_past_the_lag_bound_is_left_out_until_it_catches_up(
    migrated: str, standby_uri: str, subject: str
) -> None:
    async with replica_runtime(migrated, standby_uri, replica_max_lag_ms=200) as rt, client_of(rt) as client:
        replicas = rt.replicas
        assert replicas is not None
        replica = replicas.replicas[0]
        async with replay_paused(standby_uri):

            async def lagging() -> bool:
                await record(client, subject, "a write the paused replica has not replayed")
                return replica.state is ReplicaState.LAGGING

            await until(lagging)
            assert replica.lag_ms is not None and replica.lag_ms > 200
            before = replicas.primary_reads
            await event_ids(client, subject)
            assert replicas.primary_reads == before + 1  # the lagging replica is left out

        async def healthy() -> bool:
            return replica.state is ReplicaState.HEALTHY

        await until(healthy)


async def test_a_replica_that_does_not_answer_is_down_and_the_primary_serves(
    migrated: str, tmp_path: Any, subject: str
) -> None:
    nowhere = f"postgresql://postgres@/postgres?host={tmp_path}&port=5999"
    async with replica_runtime(migrated, nowhere) as rt, client_of(rt) as client:
        replicas = rt.replicas
        assert replicas is not None and replicas.replicas[0].state is ReplicaState.DOWN
        event_id, _ = await record(client, subject, "served by the primary")
        assert event_id in await event_ids(client, subject)
        ready = (await client.http.get("/readyz")).json()
        assert ready["status"] == "ready"  # the primary serves what the replica cannot
        assert ready["replicas"] == [{"target": replicas.replicas[0].target, "state": "down", "lagMs": None}]


async def test_readyz_and_metrics_show_each_replica_state_and_lag(migrated: str, standby_uri: str) -> None:
    async with replica_runtime(migrated, standby_uri) as rt, client_of(rt) as client:
        assert rt.replicas is not None
        target = rt.replicas.replicas[0].target
        ready = (await client.http.get("/readyz")).json()
        (shown,) = ready["replicas"]
        assert shown["target"] == target and shown["state"] == "healthy" and shown["lagMs"] >= 0
        metrics = (await client.http.get("/metrics")).text
        assert f'haki_replica_up{{replica="{target}"}} 1.0' in metrics
        assert f'haki_replica_lag_seconds{{replica="{target}"}}' in metrics
        assert f'haki_replica_state{{replica="{target}",state="healthy"}} 1.0' in metrics
        assert 'haki_reads_total{target="primary"}' in metrics


async def test_a_read_on_a_replica_that_goes_away_runs_again_on_the_primary(
    migrated: str, standby_uri: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with replica_runtime(migrated, standby_uri) as rt:
        replicas = rt.replicas
        assert replicas is not None
        replica = replicas.replicas[0]
        route = rt.routed(None).reads

        async def on_standby(conn: asyncpg.Connection) -> bool:
            in_recovery: bool = await conn.fetchval("SELECT pg_is_in_recovery() FROM pg_sleep(0.5)")
            return in_recovery

        read = asyncio.create_task(route.run(on_standby))
        standby = await asyncpg.connect(standby_uri)
        try:
            # The replica ends the session in the middle of its statement, as a crash does.
            query = "SELECT pid FROM pg_stat_activity WHERE query LIKE '%pg_sleep(0.5)%' AND pid <> pg_backend_pid()"
            async with asyncio.timeout(5):
                while not (pids := [r["pid"] for r in await standby.fetch(query)]):
                    await asyncio.sleep(0.01)
            await standby.execute("SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) AS pid", pids)
        finally:
            await standby.close()
        assert await read is False  # no error: the primary, in no recovery, answered it
        assert replicas.primary_reads == 1
        # Marked down at once (a later check may already have found it well again).
        assert any(f"replica {replica.target} lost" in r.getMessage() for r in caplog.records)

        async def healthy() -> bool:
            return replica.state is ReplicaState.HEALTHY

        await until(healthy)  # the next checks find it well again


async def test_an_mcp_session_reads_its_own_writes(migrated: str, standby_uri: str, subject: str) -> None:
    async with replica_runtime(migrated, standby_uri, replica_max_lag_ms=3_600_000, replica_wait_ms=50) as rt:
        gateway = Gateway(schema_for(rt.settings))
        session = Invocation(rt, Caller.operator("default"))
        async with replay_paused(standby_uri):
            text = f"the MCP session's own turn {uuid.uuid4().hex[:6]}"
            turn = {"subjectId": subject, "kind": "conversation.message", "payload": {"text": text}}
            await gateway.run(REMEMBER, {"inputs": [turn]}, session)
            assert session.session.held is not None
            data = await gateway.run(GET_CONTEXT, {"subject": subject, "query": text}, session)
            assert text in data["context"]["rendered"]
            stranger = Invocation(rt, Caller.operator("default"))  # another session: no token
            data = await gateway.run(GET_CONTEXT, {"subject": subject, "query": text}, stranger)
            assert text not in data["context"]["rendered"]


async def test_a_stateless_mcp_call_without_a_token_reads_from_the_primary(
    migrated: str, standby_uri: str, subject: str
) -> None:
    # MCP over HTTP keeps no session: a call that sends no token must still see the turn its
    # agent recorded a call before, so its reads go to the primary.
    async with replica_runtime(migrated, standby_uri, replica_max_lag_ms=3_600_000) as rt:
        gateway = Gateway(schema_for(rt.settings))
        text = f"recorded over MCP without a session {uuid.uuid4().hex[:6]}"
        turn = {"subjectId": subject, "kind": "conversation.message", "payload": {"text": text}}
        async with replay_paused(standby_uri):
            await gateway.run(REMEMBER, {"inputs": [turn]}, Invocation(rt, Caller.operator("default"), stateless=True))
            asked = Invocation(rt, Caller.operator("default"), stateless=True)
            data = await gateway.run(GET_CONTEXT, {"subject": subject, "query": text}, asked)
            assert text in data["context"]["rendered"]


@pytest.mark.parametrize(
    ("error", "lost"),
    [
        (ConnectionRefusedError(), True),
        (asyncpg.exceptions.ConnectionDoesNotExistError("closed in the middle of operation"), True),
        (asyncpg.exceptions.AdminShutdownError("terminating connection"), True),
        (
            asyncpg.exceptions.InternalClientError("cannot switch to state 12; another operation (2) is in progress"),
            True,
        ),
        (asyncpg.exceptions.SerializationError("canceling statement due to conflict with recovery"), True),
        (asyncpg.exceptions.UndefinedColumnError("no such column"), False),
        (ValueError("a bug"), False),
    ],
)
def test_a_read_runs_again_on_the_primary_only_for_a_lost_server(error: BaseException, lost: bool) -> None:
    # A connection a dying replica left mid-operation (asyncpg's InternalClientError) is lost too;
    # an error of the statement itself is no reason to run it twice.
    assert lost_server(error) is lost
