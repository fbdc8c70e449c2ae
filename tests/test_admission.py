"""Admission control of `context` calls: overload is shed (UNAVAILABLE, 503, Retry-After), not queued
without bound; a waiting call gets the next free slot; a refused call writes no trace."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path

import asyncpg
import httpx
import pytest
from conftest import GraphQLClient, client_for
from contextlib_helpers import record, with_settings

from haki_context.core.errors import Unavailable
from haki_context.core.serving.admission import OVERLOADED, Admission
from haki_context.core.serving.runtime import Runtime
from haki_context.db.pool import init_connection

QUERY = 'query($s: String!) { context(subjectId: $s, query: "which language") { traceId } }'


@pytest.fixture
async def narrow(runtime: Runtime) -> AsyncIterator[tuple[Runtime, GraphQLClient]]:
    """One slot, one place in line, a short wait: the test holds the slot itself."""
    rt = with_settings(runtime, max_concurrent_context=1, admission_queue=1, admission_wait_s=5.0)
    client = client_for(rt)
    yield rt, client
    await client.http.aclose()


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition never held"
        await asyncio.sleep(0.005)


async def trace_count(rt: Runtime, subject: str) -> int:
    async with rt.pool.acquire() as conn:
        return int(await conn.fetchval("SELECT count(*) FROM context_traces WHERE subject_id = $1", subject))


def assert_shed(response: httpx.Response) -> None:
    assert response.status_code == 503
    assert response.headers["retry-after"] == "1"
    error = response.json()["errors"][0]
    assert error["extensions"]["code"] == "UNAVAILABLE"
    assert "overloaded" in error["message"] and "retry" in error["message"]


# Through the GraphQL endpoint.


async def test_full_line_is_refused_at_once_and_the_waiter_gets_the_freed_slot(
    narrow: tuple[Runtime, GraphQLClient], subject: str
) -> None:
    rt, client = narrow
    await record(client, subject, ["Ann writes invoices in German."])
    await rt.admission.acquire()  # the one slot
    try:
        waiting = asyncio.create_task(client.post(QUERY, {"s": subject}))
        await until(lambda: rt.admission.waiting == 1)
        started = time.monotonic()
        assert_shed(await client.post(QUERY, {"s": subject}))
        assert time.monotonic() - started < 1.0, "a full line refuses at once"
        assert not waiting.done()
    finally:
        rt.admission.release()
    answered = await waiting
    assert answered.status_code == 200
    assert answered.json()["data"]["context"]["traceId"]
    assert (rt.admission.in_use, rt.admission.waiting) == (0, 0)
    assert await trace_count(rt, subject) == 1


async def test_a_call_waiting_past_the_wait_is_refused_and_writes_no_trace(runtime: Runtime, subject: str) -> None:
    rt = with_settings(runtime, max_concurrent_context=1, admission_queue=1, admission_wait_s=0.3)
    client = client_for(rt)
    try:
        await rt.admission.acquire()
        try:
            started = time.monotonic()
            response = await client.post(QUERY, {"s": subject})
            waited = time.monotonic() - started
        finally:
            rt.admission.release()
        assert_shed(response)
        assert 0.3 <= waited < 2.0
        assert rt.admission.waiting == 0
        assert await trace_count(rt, subject) == 0
        ok = await client.post(QUERY, {"s": subject})  # the slot is free again
        assert ok.status_code == 200 and "errors" not in ok.json()
        assert await trace_count(rt, subject) == 1
    finally:
        await client.http.aclose()


async def test_no_line_refuses_when_the_slots_are_taken(runtime: Runtime, subject: str) -> None:
    rt = with_settings(runtime, max_concurrent_context=1, admission_queue=0)
    client = client_for(rt)
    try:
        await rt.admission.acquire()
        try:
            assert_shed(await client.post(QUERY, {"s": subject}))
        finally:
            rt.admission.release()
        assert await trace_count(rt, subject) == 0
    finally:
        await client.http.aclose()


async def test_other_fields_are_not_admitted(narrow: tuple[Runtime, GraphQLClient]) -> None:
    rt, client = narrow
    await rt.admission.acquire()
    try:
        response = await client.post("{ stats { contextCalls } }")
    finally:
        rt.admission.release()
    assert response.status_code == 200, response.json()


async def test_a_failing_call_releases_its_slot(narrow: tuple[Runtime, GraphQLClient]) -> None:
    rt, client = narrow
    response = await client.post('{ context(subjectId: "s", query: "q", budget: -1) { traceId } }')
    assert response.json()["errors"][0]["extensions"]["code"] == "BUDGET_EXCEEDED"
    assert rt.admission.in_use == 0


async def test_database_down_503_carries_retry_after(runtime: Runtime, tmp_path: Path) -> None:
    dsn = f"postgresql://postgres@/postgres?host={tmp_path}"  # no server listens there
    pool = await asyncpg.create_pool(dsn, min_size=0, max_size=2, init=init_connection, timeout=2.0)
    down = replace(runtime, pool=pool)
    in_view = client_for(down)
    # Outside development mode the key is checked before execution: error_response answers.
    before_view = client_for(down, down.settings.model_copy(update={"dev_mode": False}))
    try:
        response = await in_view.post('{ context(subjectId: "s", query: "q") { traceId } }')
        assert response.status_code == 503 and response.headers["retry-after"] == "1"
        assert down.admission.in_use == 0
        response = await before_view.post("{ stats { contextCalls } }", authorization="Bearer hk_not_a_key")
        assert response.status_code == 503 and response.headers["retry-after"] == "1"
        assert response.json()["errors"][0]["extensions"]["code"] == "UNAVAILABLE"
    finally:
        await in_view.http.aclose()
        await before_view.http.aclose()
        await pool.close()


# The class alone, no database.


async def test_counts_and_refusal_when_the_line_is_full() -> None:
    admission = Admission(2, 1, 5.0)
    await admission.acquire()
    await admission.acquire()
    assert (admission.in_use, admission.waiting) == (2, 0)
    waiter = asyncio.create_task(admission.acquire())
    await asyncio.sleep(0)
    assert admission.waiting == 1
    with pytest.raises(Unavailable) as refused:
        await admission.acquire()
    assert refused.value.code == "UNAVAILABLE" and refused.value.message == OVERLOADED
    admission.release()  # handed to the waiter, not freed
    await waiter
    assert (admission.in_use, admission.waiting) == (2, 0)
    admission.release()
    admission.release()
    assert (admission.in_use, admission.waiting) == (0, 0)


async def test_waiters_are_served_first_come_first_served() -> None:
    admission = Admission(1, 3, 5.0)
    await admission.acquire()
    order: list[int] = []

    async def call(n: int) -> None:
        async with admission.slot():
            order.append(n)

    tasks = [asyncio.create_task(call(n)) for n in range(3)]
    await until(lambda: admission.waiting == 3)
    admission.release()
    await asyncio.gather(*tasks)
    assert order == [0, 1, 2]
    assert (admission.in_use, admission.waiting) == (0, 0)


async def test_a_late_arrival_does_not_overtake_the_line() -> None:
    admission = Admission(1, 2, 5.0)
    await admission.acquire()
    first = asyncio.create_task(admission.acquire())
    await until(lambda: admission.waiting == 1)
    admission.release()  # the slot goes to `first`, though it has not run yet
    late = asyncio.create_task(admission.acquire())
    await first
    await until(lambda: admission.waiting == 1)
    assert not late.done()
    admission.release()
    await late
    admission.release()
    assert (admission.in_use, admission.waiting) == (0, 0)


async def test_the_wait_runs_out() -> None:
    admission = Admission(1, 1, 0.05)
    await admission.acquire()
    started = time.monotonic()
    with pytest.raises(Unavailable):
        await admission.acquire()
    assert time.monotonic() - started >= 0.05
    assert (admission.in_use, admission.waiting) == (1, 0)
    admission.release()
    assert admission.in_use == 0


async def test_a_cancelled_waiter_frees_its_place_in_line() -> None:
    admission = Admission(1, 1, 5.0)
    await admission.acquire()
    waiter = asyncio.create_task(admission.acquire())
    await until(lambda: admission.waiting == 1)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert admission.waiting == 0
    other = asyncio.create_task(admission.acquire())  # the freed place is taken
    await until(lambda: admission.waiting == 1)
    admission.release()
    await other
    admission.release()
    assert (admission.in_use, admission.waiting) == (0, 0)


async def test_a_waiter_cancelled_as_the_slot_is_handed_over_passes_it_on() -> None:
    admission = Admission(1, 2, 5.0)
    await admission.acquire()
    first = asyncio.create_task(admission.acquire())
    second = asyncio.create_task(admission.acquire())
    await until(lambda: admission.waiting == 2)
    admission.release()  # handed to `first`...
    first.cancel()  # ...which is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await first
    await second
    assert (admission.in_use, admission.waiting) == (1, 0)
    admission.release()
    assert admission.in_use == 0


async def test_slots_are_released_on_errors() -> None:
    admission = Admission(1, 0, 5.0)
    with pytest.raises(RuntimeError):
        async with admission.slot():
            raise RuntimeError("boom")
    assert admission.in_use == 0
    with pytest.raises(asyncio.CancelledError):
        async with admission.slot():
            raise asyncio.CancelledError
    assert admission.in_use == 0
    async with admission.slot():
        assert admission.in_use == 1


def test_every_runtime_has_its_own_admission_from_its_settings(runtime: Runtime) -> None:
    narrow = with_settings(runtime, max_concurrent_context=1)
    assert narrow.admission is not runtime.admission
    assert narrow.admission.slots == 1
    assert runtime.admission.slots == runtime.settings.max_concurrent_context
