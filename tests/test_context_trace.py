"""The persisted trace: every item considered, the same through `trace(id)`, scoped to the project."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import fields

from conftest import GraphQLClient, client_for
from contextlib_helpers import FULL_SELECTION, assert_fact, context, decisions, record, with_settings

from haki_context.core.packet import TraceDecision
from haki_context.core.serving import keys
from haki_context.core.serving.runtime import Runtime
from haki_context.db import keys as db_keys
from haki_context.db import traces as db_traces

TRACE_SELECTION = FULL_SELECTION[FULL_SELECTION.index("trace {") + len("trace") :]


async def test_trace_by_id_returns_exactly_what_the_packet_returned(client: GraphQLClient, subject: str) -> None:
    await assert_fact(client, subject, "a", "alpha beta")
    await assert_fact(client, subject, "b", "beta gamma")
    await assert_fact(client, subject, "c", "one")
    await assert_fact(client, subject, "c", "two", mode="CONTEST")
    await record(client, subject, ["alpha event", "beta event"])
    packet = await context(client, subject, "alpha beta", budget=12)
    again = await client.execute(f"query($id: ID!) {{ trace(id: $id) {TRACE_SELECTION} }}", {"id": packet["traceId"]})
    assert again["trace"] == packet["trace"]
    assert packet["trace"]["id"] == packet["traceId"]


async def test_trace_has_a_row_for_every_item_considered(client: GraphQLClient, subject: str) -> None:
    for i in range(5):
        await assert_fact(client, subject, f"p{i}", f"value {i}")
    await assert_fact(client, subject, "p0", "other", mode="CONTEST")
    await record(client, subject, [f"event {i}" for i in range(3)])
    packet = await context(client, subject, "value")
    rows = packet["trace"]["decisions"]
    facts = decisions(packet, itemKind="FACT")
    assert len(facts) == 6  # 4 candidates + 2 blocked members of the open set
    assert len(decisions(packet, itemKind="EPISODE")) == 3
    counts = packet["trace"]["counts"]
    assert counts["included"] + counts["excluded"] + counts["blocked"] == len(rows)
    assert counts["blocked"] == 2
    for d in rows:
        if d["decision"] != "BLOCKED":
            assert d["rank"] >= 1 and d["score"] is not None and d["similarity"] is not None
            assert d["recency"] is not None and d["fullText"] is not None and d["distance"] is not None
        assert d["tokens"] >= 1


async def test_decisions_filter_by_decision_and_kind(client: GraphQLClient, subject: str) -> None:
    await assert_fact(client, subject, "a", "one")
    await assert_fact(client, subject, "a", "two", mode="CONTEST")
    await assert_fact(client, subject, "b", "three")
    await record(client, subject, ["an event"])
    packet = await context(client, subject, "one two three", selection="traceId")
    data = await client.execute(
        "query($id: ID!) { trace(id: $id) { blocked: decisions(decision: BLOCKED) { itemKind }"
        " episodes: decisions(itemKind: EPISODE) { decision } } }",
        {"id": packet["traceId"]},
    )
    assert data["trace"]["blocked"] == [{"itemKind": "FACT"}, {"itemKind": "FACT"}]
    assert data["trace"]["episodes"] == [{"decision": "INCLUDED"}]


async def test_timings_are_real_measurements(client: GraphQLClient, subject: str) -> None:
    await assert_fact(client, subject, "a", "one")
    t = (await context(client, subject, "a fresh query text for timing"))["trace"]["timings"]
    parts = t["embedMs"] + t["retrieveMs"] + t["packMs"] + t["persistMs"]
    assert all(t[k] >= 0 for k in t) and t["retrieveMs"] > 0 and t["persistMs"] > 0
    assert parts <= t["totalMs"] + 0.5


async def test_stored_timings_are_the_ones_the_call_returned(client: GraphQLClient, subject: str) -> None:
    await assert_fact(client, subject, "a", "one")
    packet = await context(client, subject, "one", selection="traceId trace { timings { persistMs totalMs } }")
    stored = await client.execute(
        "query($id: ID!) { trace(id: $id) { timings { persistMs totalMs } } }", {"id": packet["traceId"]}
    )
    assert stored["trace"] == packet["trace"]


async def _hop_memory(client: GraphQLClient, subject: str) -> None:
    """With retrieval_top_k=1, "who runs the office" keeps the manager and hops through Claire."""
    await assert_fact(client, subject, "manager", "Claire runs the office")
    await assert_fact(client, subject, "colleague", "Claire likes espresso with Bruno")
    await assert_fact(client, subject, "c", "one")
    await assert_fact(client, subject, "c", "two", mode="CONTEST")  # a blocked pair
    await record(client, subject, ["the office event", "Claire event"])


async def test_a_trace_with_multi_hop_is_stored_as_served(runtime: Runtime, subject: str) -> None:
    c = client_for(with_settings(runtime, retrieval_top_k=1))
    try:
        await _hop_memory(c, subject)
        packet = await context(c, subject, "who runs the office")
        kinds = [(d["itemKind"], d["reasonCode"]) for d in packet["trace"]["decisions"]]
        assert ("FACT", "MULTI_HOP_EXPANSION") in kinds and ("FACT", "CONFLICT_OPEN") in kinds
        assert ("EPISODE", "TOP_SCORE") in kinds
        again = await c.execute(f"query($id: ID!) {{ trace(id: $id) {TRACE_SELECTION} }}", {"id": packet["traceId"]})
        assert again["trace"] == packet["trace"]  # every decision, in the served order
    finally:
        await c.http.aclose()


@contextlib.asynccontextmanager
async def _on_trace_insert(runtime: Runtime, name: str, query: str, action: str) -> AsyncIterator[None]:
    """A trigger that runs `action` (PL/pgSQL) before a trace row of `query` is inserted."""
    async with runtime.pool.acquire() as conn:
        await conn.execute(
            f"CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
            f" IF NEW.query = '{query}' THEN {action}; END IF; RETURN NEW; END $$"
        )
        await conn.execute(
            f"CREATE TRIGGER {name} BEFORE INSERT ON context_traces FOR EACH ROW EXECUTE FUNCTION {name}()"
        )
    try:
        yield
    finally:
        async with runtime.pool.acquire() as conn:
            await conn.execute(f"DROP TRIGGER {name} ON context_traces")
            await conn.execute(f"DROP FUNCTION {name}()")


async def test_a_failed_trace_write_fails_the_call_and_leaves_no_decision_row(
    runtime: Runtime, client: GraphQLClient, subject: str
) -> None:
    await assert_fact(client, subject, "a", "one")
    await record(client, subject, ["one event"])
    async with runtime.pool.acquire() as conn:
        before = await conn.fetchval("SELECT count(*) FROM trace_decisions")
    hops = client_for(with_settings(runtime, retrieval_top_k=1))
    refused = (
        'query($s: String!) { context(subjectId: $s, query: "one refused")'
        " { traceId rendered trace { timings { persistMs } } } }"
    )
    # The trace row is written after its decisions, in the same statement: refusing the row
    # must take the decisions with it.
    try:
        async with _on_trace_insert(runtime, "refuse_trace", "one refused", "RAISE EXCEPTION 'refused'"):
            body = (await client.post(refused, {"s": subject})).json()
            assert body["data"] is None and len(body["errors"]) == 1  # one error for the failed write
            error = body["errors"][0]
            assert error["extensions"]["code"] == "INTERNAL"
            assert error["path"] == ["context"]
            # A call with a multi-hop statement too.
            await _hop_memory(hops, f"{subject}-hop")
            error = await hops.error(refused, {"s": f"{subject}-hop"})
            assert error["extensions"]["code"] == "INTERNAL"
            async with runtime.pool.acquire() as conn:
                assert await conn.fetchval("SELECT count(*) FROM trace_decisions") == before
                assert await conn.fetchval("SELECT count(*) FROM context_traces WHERE query = 'one refused'") == 0
            assert (await context(client, subject, "one", selection="traceId"))["traceId"]  # other calls still write
    finally:
        await hops.http.aclose()


async def test_the_response_waits_for_a_slow_trace_write(runtime: Runtime, client: GraphQLClient, subject: str) -> None:
    # The packet is serialized while its trace is written; the response leaves only after the commit.
    await assert_fact(client, subject, "a", "one")
    async with _on_trace_insert(runtime, "slow_trace", "one slowly", "PERFORM pg_sleep(0.3)"):
        timed = "traceId trace { id timings { persistMs totalMs } }"
        body = await client.execute(
            'query($s: String!) { a: context(subjectId: $s, query: "one slowly") { traceId rendered }'
            f' b: context(subjectId: $s, query: "one") {{ {timed} }} }}',
            {"s": subject},
        )
        query = "query($id: ID!) { trace(id: $id) { id timings { persistMs totalMs } } }"
        assert (await client.execute(query, {"id": body["a"]["traceId"]}))["trace"] is not None  # committed
        stored = await client.execute(query, {"id": body["b"]["traceId"]})
        assert stored["trace"] == body["b"]["trace"]  # with the timings the response gave


async def test_trace_of_another_project_is_null(runtime: Runtime, client: GraphQLClient, subject: str) -> None:
    new = keys.generate()
    async with runtime.pool.acquire() as conn:
        await db_keys.insert_key(
            conn, f"other-{subject}", key_id=new.key_id, key_hash=new.key_hash, prefix=new.prefix, name=None
        )
    other = client_for(runtime)
    try:
        await assert_fact(client, subject, "a", "one")
        packet = await context(client, subject, "one", selection="traceId")
        query = "query($id: ID!) { trace(id: $id) { id } }"
        assert (await client.execute(query, {"id": packet["traceId"]}))["trace"] == {"id": packet["traceId"]}
        seen = await other.execute(query, {"id": packet["traceId"]}, authorization=f"Bearer {new.plain}")
        assert seen["trace"] is None
    finally:
        await other.http.aclose()


async def test_unknown_or_malformed_trace_id_is_null(client: GraphQLClient) -> None:
    for bad in ("00000000-0000-0000-0000-000000000000", "not-an-id"):
        assert (await client.execute("query($id: ID!) { trace(id: $id) { id } }", {"id": bad}))["trace"] is None


async def test_same_data_and_query_give_the_same_packet(client: GraphQLClient, subject: str) -> None:
    for i in range(6):
        await assert_fact(client, subject, f"k{i}", "same words here")
    await record(client, subject, ["same words here"] * 4)
    first = await context(client, subject, "same words")
    second = await context(client, subject, "same words")
    assert [f["id"] for f in first["facts"]] == [f["id"] for f in second["facts"]]
    assert [e["eventId"] for e in first["episodes"]] == [e["eventId"] for e in second["episodes"]]
    assert first["rendered"] == second["rendered"]


async def test_trace_commit_waits_for_the_disk_only_when_durable(
    runtime: Runtime, client: GraphQLClient, subject: str
) -> None:
    await assert_fact(client, subject, "a", "one")
    async with runtime.pool.acquire() as conn:
        # The commit happens right after the statement, under the setting in force at its end.
        await conn.execute(
            "CREATE TABLE seen_commit_modes (query text, mode text);"
            " CREATE FUNCTION see_commit_mode() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
            " INSERT INTO seen_commit_modes SELECT query, current_setting('synchronous_commit') FROM written;"
            " RETURN NULL; END $$;"
            " CREATE TRIGGER see_commit_mode AFTER INSERT ON context_traces REFERENCING NEW TABLE AS written"
            " FOR EACH STATEMENT EXECUTE FUNCTION see_commit_mode()"
        )
    durable = client_for(with_settings(runtime, durable_traces=True))
    try:
        await context(client, subject, "one fast", selection="traceId")
        await context(durable, subject, "one durable", selection="traceId")
        async with runtime.pool.acquire() as conn:
            seen = dict(await conn.fetch("SELECT query, mode FROM seen_commit_modes"))
            assert seen == {"one fast": "off", "one durable": "on"}
    finally:
        await durable.http.aclose()
        async with runtime.pool.acquire() as conn:
            await conn.execute(
                "DROP TRIGGER see_commit_mode ON context_traces; DROP FUNCTION see_commit_mode();"
                " DROP TABLE seen_commit_modes"
            )


def test_decision_columns_are_the_fields_the_trace_decisions_carry() -> None:
    # The decisions travel as JSON objects named by TraceDecision's fields.
    assert set(db_traces._DECISION_COLUMNS) == {f.name for f in fields(TraceDecision)}
