"""History kept: each fact says when it stopped being ACTIVE and why, each conflict member when it
joined its set, and an export carries both (an older file is dated as the migration dates it)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import orjson
import pytest
from conftest import GraphQLClient
from contextlib_helpers import assert_fact

from haki_context.core.errors import InvalidInput
from haki_context.core.memory.portability import export_lines, import_lines
from haki_context.core.serving.auth import DEV_PROJECT, Caller
from haki_context.core.serving.runtime import Runtime

# What an export holds of the history; a file written before it was kept has none of it.
HISTORY_FIELDS = ("endedAt", "endReason", "activeValidTo", "reinforcedAt", "membersAddedAt")

FACT = "id status recordedAt endedAt endReason supersededBy { id recordedAt } value"


async def fact(client: GraphQLClient, fact_id: str) -> dict[str, Any]:
    data = await client.execute(f"query($id: ID!) {{ fact(id: $id) {{ {FACT} }} }}", {"id": fact_id})
    read: dict[str, Any] = data["fact"]
    return read


async def retract(client: GraphQLClient, fact_id: str) -> dict[str, Any]:
    data = await client.execute(
        f'mutation($id: ID!) {{ retractFact(id: $id, reason: "wrong") {{ {FACT} }} }}', {"id": fact_id}
    )
    retracted: dict[str, Any] = data["retractFact"]
    return retracted


def at(value: str) -> datetime:
    return datetime.fromisoformat(value)


async def test_an_active_fact_has_not_ended(client: GraphQLClient, subject: str) -> None:
    written = await assert_fact(client, subject, "home_city", "Lisbon")
    got = await fact(client, written["fact"]["id"])
    assert (got["status"], got["endedAt"], got["endReason"]) == ("ACTIVE", None, None)


async def test_a_superseded_fact_ends_when_its_successor_was_recorded(client: GraphQLClient, subject: str) -> None:
    old = await assert_fact(client, subject, "home_city", "Lisbon")
    new = await assert_fact(client, subject, "home_city", "Porto", validFrom="2020-01-01T00:00:00+00:00")
    assert new["outcome"] == "SUPERSEDED_PREVIOUS"
    got = await fact(client, old["fact"]["id"])
    assert got["status"] == "SUPERSEDED" and got["endReason"] == "SUPERSEDED"
    assert got["supersededBy"]["id"] == new["fact"]["id"]
    # System time, not valid time: the new value's validFrom (2020) ends the old one's validity,
    # but the server stopped serving the old value when it recorded the new one.
    assert at(got["endedAt"]) == at(got["supersededBy"]["recordedAt"])


async def test_a_retracted_fact_ends_at_its_retraction(client: GraphQLClient, subject: str) -> None:
    written = await assert_fact(client, subject, "pet", "cat")
    before = await fact(client, written["fact"]["id"])
    got = await retract(client, written["fact"]["id"])
    assert (got["status"], got["endReason"], got["supersededBy"]) == ("RETRACTED", "RETRACTED", None)
    assert at(got["endedAt"]) > at(before["recordedAt"])


async def test_retracting_a_superseded_fact_keeps_the_end_of_its_supersession(
    client: GraphQLClient, subject: str
) -> None:
    old = await assert_fact(client, subject, "pet", "cat")
    await assert_fact(client, subject, "pet", "dog")
    superseded = await fact(client, old["fact"]["id"])
    got = await retract(client, old["fact"]["id"])
    assert got["status"] == "RETRACTED"
    # It stopped being served when it was superseded: the later retraction does not move that.
    assert (got["endReason"], got["endedAt"]) == ("SUPERSEDED", superseded["endedAt"])


async def test_resolving_a_conflict_ends_the_members_not_kept_at_the_resolution(
    client: GraphQLClient, subject: str
) -> None:
    first = await assert_fact(client, subject, "employer", "Acme")
    second = await assert_fact(client, subject, "employer", "Globex", mode="CONTEST")
    conflict_id = second["conflict"]["id"]
    data = await client.execute(
        "mutation($id: ID!, $k: ID!) { resolveConflict(id: $id, keepFactId: $k) { status resolvedAt } }",
        {"id": conflict_id, "k": second["fact"]["id"]},
    )
    resolved = data["resolveConflict"]
    lost, kept = await fact(client, first["fact"]["id"]), await fact(client, second["fact"]["id"])
    assert (lost["endReason"], lost["supersededBy"]["id"]) == ("SUPERSEDED", second["fact"]["id"])
    assert at(lost["endedAt"]) == at(resolved["resolvedAt"])
    assert (kept["status"], kept["endedAt"], kept["endReason"]) == ("ACTIVE", None, None)


async def test_a_fact_joining_an_open_conflict_is_dated_from_when_it_joined(
    client: GraphQLClient, runtime: Runtime, subject: str
) -> None:
    first = await assert_fact(client, subject, "employer", "Acme")
    second = await assert_fact(client, subject, "employer", "Globex", mode="CONTEST")
    third = await assert_fact(client, subject, "employer", "Initech", mode="CONTEST")
    assert third["conflict"]["id"] == second["conflict"]["id"]
    async with runtime.pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT m.fact_id, m.added_at, c.created_at, f.recorded_at FROM conflict_members m"
            " JOIN conflict_sets c ON c.project_id = m.project_id AND c.id = m.conflict_id"
            " JOIN facts f ON f.project_id = m.project_id AND f.id = m.fact_id"
            " WHERE m.conflict_id = $1 ORDER BY m.position",
            uuid.UUID(second["conflict"]["id"]),
        )
    joined = {str(r["fact_id"]): r for r in rows}
    assert joined[first["fact"]["id"]]["added_at"] == joined[first["fact"]["id"]]["created_at"]
    assert joined[second["fact"]["id"]]["added_at"] == joined[second["fact"]["id"]]["created_at"]
    late = joined[third["fact"]["id"]]
    assert late["added_at"] == late["recorded_at"] > late["created_at"]


async def _export(runtime: Runtime, subject: str) -> list[dict[str, Any]]:
    return [orjson.loads(line) async for line in export_lines(runtime.reads, Caller.operator(DEV_PROJECT), subject)]


async def test_an_export_carries_the_ends_and_an_import_restores_them(
    client: GraphQLClient, runtime: Runtime, subject: str
) -> None:
    old = await assert_fact(client, subject, "pet", "cat")
    await assert_fact(client, subject, "pet", "dog")
    gone = await assert_fact(client, subject, "nickname", "Annie")
    await retract(client, gone["fact"]["id"])
    await assert_fact(client, subject, "employer", "Acme")
    await assert_fact(client, subject, "employer", "Globex", mode="CONTEST")
    exported = await _export(runtime, subject)
    facts = {r["id"]: r for r in exported if r.get("type") == "fact"}
    assert facts[old["fact"]["id"]]["endReason"] == "SUPERSEDED" and facts[old["fact"]["id"]]["endedAt"]
    assert facts[gone["fact"]["id"]]["endReason"] == "RETRACTED" and facts[gone["fact"]["id"]]["endedAt"]
    (conflict,) = [r for r in exported if r.get("type") == "conflict"]
    assert len(conflict["membersAddedAt"]) == len(conflict["factIds"]) == 2

    project = f"project-{uuid.uuid4().hex[:12]}"
    await import_lines(runtime, Caller.operator(project), [orjson.dumps(r) for r in exported])
    again = [orjson.loads(line) async for line in export_lines(runtime.reads, Caller.operator(project), subject)]
    ends = sorted((r["status"], r["endReason"], r["endedAt"]) for r in exported if r.get("type") == "fact")
    assert sorted((r["status"], r["endReason"], r["endedAt"]) for r in again if r.get("type") == "fact") == ends
    (conflict_again,) = [r for r in again if r.get("type") == "conflict"]
    assert conflict_again["membersAddedAt"] == conflict["membersAddedAt"]


async def test_a_file_exported_before_ends_were_kept_is_dated_as_the_migration_dates(
    client: GraphQLClient, runtime: Runtime, subject: str
) -> None:
    old = await assert_fact(client, subject, "pet", "cat", validTo="2030-01-01T00:00:00+00:00")
    new = await assert_fact(client, subject, "pet", "dog")
    gone = await assert_fact(client, subject, "nickname", "Annie")
    await retract(client, gone["fact"]["id"])
    older = []
    for r in await _export(runtime, subject):
        older.append({k: v for k, v in r.items() if k not in HISTORY_FIELDS})

    project = f"project-{uuid.uuid4().hex[:12]}"
    await import_lines(runtime, Caller.operator(project), [orjson.dumps(r) for r in older])
    again = {
        (r["predicate"], orjson.dumps(r["value"])): r
        async for r in _lines(export_lines(runtime.reads, Caller.operator(project), subject))
        if r.get("type") == "fact"
    }
    superseded, successor = again[("pet", b'"cat"')], again[("pet", b'"dog"')]
    # The supersession is dated by the successor's recording; the retraction's instant is unknown.
    assert (superseded["endReason"], superseded["endedAt"]) == ("SUPERSEDED", successor["recordedAt"])
    assert (again[("nickname", b'"Annie"')]["endReason"], again[("nickname", b'"Annie"')]["endedAt"]) == (
        "RETRACTED",
        None,
    )
    # The validTo while ACTIVE (2030) was cut at the supersession: no longer known, it counts as open.
    assert superseded["activeValidTo"] is None and superseded["validTo"] == successor["recordedAt"]
    assert old["fact"]["id"] != superseded["id"] and new["outcome"] == "SUPERSEDED_PREVIOUS"


async def _lines(stream: Any) -> Any:
    async for line in stream:
        yield orjson.loads(line)


async def test_a_supersession_keeps_the_validity_the_fact_had_while_active(
    client: GraphQLClient, runtime: Runtime, subject: str
) -> None:
    old = await assert_fact(client, subject, "plan", "gold", validTo="2030-01-01T00:00:00+00:00")
    await assert_fact(client, subject, "plan", "silver", validFrom="2020-01-01T00:00:00+00:00")
    data = await client.execute("query($id: ID!) { fact(id: $id) { validTo } }", {"id": old["fact"]["id"]})
    assert at(data["fact"]["validTo"]) == at("2020-01-01T00:00:00+00:00")  # cut by the successor's validity
    async with runtime.pool.acquire() as conn:
        kept = await conn.fetchval("SELECT active_valid_to FROM facts WHERE id = $1", uuid.UUID(old["fact"]["id"]))
    assert kept == at("2030-01-01T00:00:00+00:00")  # what a past instant's validity reads


async def test_every_reinforcement_is_listed(client: GraphQLClient, runtime: Runtime, subject: str) -> None:
    first = await assert_fact(client, subject, "pet", "cat")
    for _ in range(2):
        assert (await assert_fact(client, subject, "pet", "cat"))["outcome"] == "REINFORCED"
    async with runtime.pool.acquire() as conn:
        row = await conn.fetchrow(
            "SELECT reinforced_at, last_reinforced_at, recorded_at FROM facts WHERE id = $1",
            uuid.UUID(first["fact"]["id"]),
        )
    assert len(row["reinforced_at"]) == 2 and row["reinforced_at"] == sorted(row["reinforced_at"])
    assert row["reinforced_at"][-1] == row["last_reinforced_at"] and row["reinforced_at"][0] > row["recorded_at"]


async def test_an_import_refuses_an_active_fact_that_says_it_ended(
    client: GraphQLClient, runtime: Runtime, subject: str
) -> None:
    await assert_fact(client, subject, "pet", "cat")
    exported = await _export(runtime, subject)
    for field, value in (
        ("endedAt", "2026-01-01T00:00:00+00:00"),
        ("endReason", "RETRACTED"),
        ("activeValidTo", "2026-01-01T00:00:00+00:00"),
    ):
        lines = [orjson.dumps({**r, field: value} if r.get("type") == "fact" else r) for r in exported]
        with pytest.raises(InvalidInput, match="an ACTIVE fact has no endedAt"):
            await import_lines(runtime, Caller.operator(f"project-{uuid.uuid4().hex[:12]}"), lines)
