"""`statsSeries`: usage figures bucket by bucket, computed as `stats` computes them, scoped to the project."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from conftest import ProjectClient
from contextlib_helpers import assert_fact, context, record

from haki_context.core.serving.runtime import Runtime

SERIES = """query($since: DateTime!, $until: DateTime, $bucket: StatsBucket!) {
  statsSeries(since: $since, until: $until, bucket: $bucket) {
    start end contextCalls injectedCalls injectionRate emptyCalls emptyRate noRelevantMemoryCalls degradedCalls
    factsServed usedTokens blockedDecisions gatedDecisions reasonCodes { reasonCode count }
    latency { phase p50Ms p95Ms }
  }
}"""

STATS = """query($since: DateTime) { stats(since: $since) {
  contextCalls injectionRate emptyCalls degradedCalls latencyP50Ms latencyP95Ms reasonCodes { reasonCode count }
} }"""


def iso(instant: datetime) -> str:
    return instant.isoformat()


async def series(client: ProjectClient, since: datetime, bucket: str, until: datetime | None = None) -> Any:
    variables = {"since": iso(since), "until": iso(until) if until else None, "bucket": bucket}
    return (await client.execute(SERIES, variables))["statsSeries"]


async def move_traces(rt: Runtime, project_id: str, instants: list[datetime]) -> None:
    """Give the project's traces (oldest first) the instants given, as if they were made then."""
    async with rt.pool.acquire() as conn:
        ids = await conn.fetchval(
            "SELECT array_agg(id ORDER BY created_at, id) FROM context_traces WHERE project_id = $1", project_id
        )
        assert len(ids) == len(instants)
        await conn.execute(
            "UPDATE context_traces t SET created_at = m.at FROM unnest($2::uuid[], $3::timestamptz[]) AS m(id, at)"
            " WHERE t.project_id = $1 AND t.id = m.id",
            project_id,
            ids,
            instants,
        )


async def test_a_bucket_holds_what_stats_reports_for_the_same_calls(
    project_client: ProjectClient, subject: str
) -> None:
    await assert_fact(project_client, subject, "a", "apples")
    await assert_fact(project_client, subject, "b", "bananas")
    await assert_fact(project_client, subject, "b", "berries", mode="CONTEST")
    await record(project_client, subject, ["we ate apples"])
    served = await context(project_client, subject, "apples")  # DEGRADED: two facts blocked by the conflict
    await context(project_client, subject + "-empty", "anything")  # serves nothing
    now = datetime.now(UTC)
    since = now - timedelta(days=2)
    rows = await series(project_client, since, "DAY")
    stats = (await project_client.execute(STATS, {"since": iso(since)}))["stats"]
    busy = [r for r in rows if r["contextCalls"]]
    assert len(busy) == 1 or sum(r["contextCalls"] for r in busy) == 2  # a call may fall either side of midnight
    total = sum(r["contextCalls"] for r in rows)
    assert total == stats["contextCalls"] == 2
    if len(busy) == 1:
        row = busy[0]
        assert row["injectionRate"] == stats["injectionRate"] == 0.5 and row["injectedCalls"] == 1
        assert row["emptyCalls"] == stats["emptyCalls"] == 1 and row["emptyRate"] == 0.5
        assert row["degradedCalls"] == stats["degradedCalls"] == 1
        assert row["factsServed"] == len(served["facts"]) and row["usedTokens"] == served["usedTokens"]
        assert row["blockedDecisions"] == 2 and row["gatedDecisions"] == 0
        assert row["reasonCodes"] == stats["reasonCodes"]
        latency = {p["phase"]: p for p in row["latency"]}
        assert list(latency) == ["EMBED", "RETRIEVE", "PACK", "PERSIST", "TOTAL"]
        assert latency["TOTAL"]["p50Ms"] == stats["latencyP50Ms"]
        assert latency["TOTAL"]["p95Ms"] == stats["latencyP95Ms"]
        assert 0 < latency["PERSIST"]["p50Ms"] <= latency["PERSIST"]["p95Ms"]


async def test_calls_fall_in_their_hour_and_the_window_is_clipped(
    runtime: Runtime, project_client: ProjectClient, subject: str
) -> None:
    await assert_fact(project_client, subject, "a", "apples")
    for _ in range(4):
        await context(project_client, subject, "apples", selection="traceId")
    day = datetime(2026, 3, 4, tzinfo=UTC)
    at = [day + timedelta(hours=10, minutes=15), day + timedelta(hours=10, minutes=45)]
    at += [day + timedelta(hours=12, minutes=5), day + timedelta(hours=13)]
    await move_traces(runtime, project_client.project_id, at)
    rows = await series(project_client, day + timedelta(hours=10, minutes=30), "HOUR", day + timedelta(hours=13))
    assert [(r["start"], r["end"], r["contextCalls"]) for r in rows] == [
        (iso(day + timedelta(hours=10, minutes=30)), iso(day + timedelta(hours=11)), 1),
        (iso(day + timedelta(hours=11)), iso(day + timedelta(hours=12)), 0),
        (iso(day + timedelta(hours=12)), iso(day + timedelta(hours=13)), 1),  # until is exclusive: 13:00 is out
    ]
    quiet = rows[1]
    assert quiet["injectionRate"] == 0 and quiet["emptyRate"] == 0 and quiet["blockedDecisions"] == 0
    assert {p["phase"]: (p["p50Ms"], p["p95Ms"]) for p in quiet["latency"]}["TOTAL"] == (None, None)
    assert rows[0]["injectionRate"] == 1.0 and rows[0]["latency"][4]["p50Ms"] > 0


async def test_weeks_start_on_monday_and_days_at_midnight_utc(
    runtime: Runtime, project_client: ProjectClient, subject: str
) -> None:
    await assert_fact(project_client, subject, "a", "apples")
    for _ in range(2):
        await context(project_client, subject, "apples", selection="traceId")
    sunday, monday = datetime(2026, 3, 8, 23, 59, tzinfo=UTC), datetime(2026, 3, 9, 0, 1, tzinfo=UTC)
    await move_traces(runtime, project_client.project_id, [sunday, monday])
    weeks = await series(project_client, datetime(2026, 3, 1, tzinfo=UTC), "WEEK", datetime(2026, 3, 16, tzinfo=UTC))
    assert [(w["start"], w["contextCalls"]) for w in weeks] == [
        ("2026-03-01T00:00:00+00:00", 0),  # a Sunday: clipped, its week began on Monday 23 February
        ("2026-03-02T00:00:00+00:00", 1),  # Monday to Monday: Sunday 8 March at 23:59 is in it
        ("2026-03-09T00:00:00+00:00", 1),
    ]
    days = await series(project_client, datetime(2026, 3, 8, 12, tzinfo=UTC), "DAY", datetime(2026, 3, 10, tzinfo=UTC))
    assert [(d["start"], d["contextCalls"]) for d in days] == [
        ("2026-03-08T12:00:00+00:00", 1),
        ("2026-03-09T00:00:00+00:00", 1),
    ]


async def test_another_projects_calls_are_not_counted(project_client: ProjectClient, client: Any, subject: str) -> None:
    await context(client, subject, "anything", selection="traceId")  # the development project
    rows = await series(project_client, datetime.now(UTC) - timedelta(hours=2), "HOUR")
    assert sum(r["contextCalls"] for r in rows) == 0 and len(rows) in (2, 3)


async def test_a_window_that_is_empty_reversed_or_too_long_is_invalid_input(project_client: ProjectClient) -> None:
    now = datetime.now(UTC)
    for since, until, bucket in (
        (now, now, "HOUR"),
        (now, now - timedelta(hours=1), "DAY"),
        (now - timedelta(days=42), now, "HOUR"),
        (now + timedelta(days=1), None, "HOUR"),
    ):
        variables = {"since": iso(since), "until": iso(until) if until else None, "bucket": bucket}
        error = await project_client.error(SERIES, variables)
        assert error["extensions"]["code"] == "INVALID_INPUT", (since, until, bucket, error)
    rows = await series(project_client, now - timedelta(days=40), "HOUR", now)
    assert 960 <= len(rows) <= 961 and all(r["contextCalls"] == 0 for r in rows)
