"""Tenancy: the API key sets the project; another project's ids behave exactly like unknown ids."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from conftest import GraphQLClient, client_for, make_settings

from haki_context.core.serving import keys as core_keys
from haki_context.core.serving.runtime import Runtime
from haki_context.db import keys as db_keys

ASSERT = """
mutation($input: FactInput!) {
  assertFact(input: $input) { outcome fact { id status version sourceEventIds } superseded { id } conflict { id } }
}
"""
RECORD = "mutation($input: EventInput!) { recordEvent(input: $input) { id } }"
RETRACT = "mutation($id: ID!) { retractFact(id: $id) { id } }"
OPEN = "mutation($ids: [ID!]!) { openConflict(factIds: $ids) { id } }"
RESOLVE = "mutation($id: ID!, $keep: ID!) { resolveConflict(id: $id, keepFactId: $keep) { id } }"
DISMISS = "mutation($id: ID!) { dismissConflict(id: $id) { id } }"
READS = """
query($fact: ID!, $event: ID!, $s: String!) {
  fact(id: $fact) { id }
  event(id: $event) { id }
  facts(subjectId: $s) { edges { node { id } } }
  events(subjectId: $s) { edges { node { id } } }
  conflicts(subjectId: $s) { edges { node { id } } }
}
"""
FACT_STATE = "query($id: ID!) { fact(id: $id) { id status version supersededBy { id } } }"


@dataclass
class Tenant:
    project: str
    key: str
    key_id: str

    @property
    def auth(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.key}"}


async def make_tenant(runtime: Runtime, name: str) -> Tenant:
    project = f"{name}-{uuid.uuid4().hex[:8]}"
    new = core_keys.generate()
    async with runtime.pool.acquire() as conn:
        await db_keys.insert_key(
            conn, project, key_id=new.key_id, key_hash=new.key_hash, prefix=new.prefix, name=f"test {name}"
        )
    return Tenant(project, new.plain, new.key_id)


@pytest.fixture
async def keyed(runtime: Runtime, migrated: str) -> AsyncIterator[GraphQLClient]:
    """A client of a server that requires keys (HAKI_DEV_MODE=0)."""
    c = client_for(runtime, make_settings(migrated, dev_mode=False))
    yield c
    await c.http.aclose()


@pytest.fixture
async def tenants(runtime: Runtime) -> tuple[Tenant, Tenant]:
    return await make_tenant(runtime, "alpha"), await make_tenant(runtime, "beta")


async def run(
    client: GraphQLClient, tenant: Tenant, query: str, variables: dict[str, Any] | None = None
) -> dict[str, Any]:
    return await client.execute(query, variables, **tenant.auth)


async def fail(client: GraphQLClient, tenant: Tenant, query: str, variables: dict[str, Any]) -> dict[str, Any]:
    return await client.error(query, variables, **tenant.auth)


def same_error(err: dict[str, Any], unknown_err: dict[str, Any], foreign_id: str, unknown_id: str) -> None:
    """Two answers are indistinguishable once each names its own id."""
    assert err["extensions"] == unknown_err["extensions"]
    assert err["message"].replace(foreign_id, "<id>") == unknown_err["message"].replace(unknown_id, "<id>")


# ---------------------------------------------------------------- authentication


async def test_no_key_is_401_unauthenticated(keyed: GraphQLClient, subject: str) -> None:
    response = await keyed.post(RECORD, {"input": {"subjectId": subject, "kind": "k", "payload": {}}})
    assert response.status_code == 401
    body = response.json()
    assert body["data"] is None
    assert body["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"


@pytest.mark.parametrize(
    "header",
    ["Bearer hk_not-a-real-key", "Bearer ", "Basic dXNlcjpwYXNz", "hk_without_scheme", "Bearer  \t "],
)
async def test_bad_key_is_401_unauthenticated(keyed: GraphQLClient, header: str) -> None:
    response = await keyed.post("{ __typename }", authorization=header)
    assert response.status_code == 401
    assert response.json()["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"


async def test_valid_key_is_accepted_with_any_scheme_case(keyed: GraphQLClient, tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    for scheme in ("Bearer", "bearer", "BEARER"):
        response = await keyed.post("{ __typename }", authorization=f"{scheme} {alpha.key}")
        assert response.status_code == 200 and response.json()["data"] == {"__typename": "Query"}


async def test_revoked_key_is_401_unauthenticated(
    keyed: GraphQLClient, runtime: Runtime, migrated: str, subject: str
) -> None:
    tenant = await make_tenant(runtime, "revoked")
    assert (await keyed.post("{ __typename }", None, **tenant.auth)).status_code == 200
    async with runtime.pool.acquire() as conn:
        assert await db_keys.revoke_key(conn, tenant.key_id)
    # A fresh server process has no cached lookup (a running one forgets within its 5 s TTL).
    fresh = client_for(runtime, make_settings(migrated, dev_mode=False))
    try:
        response = await fresh.post("{ __typename }", None, **tenant.auth)
        assert response.status_code == 401
        assert response.json()["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"
    finally:
        await fresh.http.aclose()


async def test_health_endpoints_need_no_key(keyed: GraphQLClient) -> None:
    assert (await keyed.http.get("/healthz")).status_code == 200
    assert (await keyed.http.get("/readyz")).status_code == 200


# ---------------------------------------------------------------- isolation


async def test_another_projects_ids_read_as_null(
    keyed: GraphQLClient, tenants: tuple[Tenant, Tenant], subject: str
) -> None:
    alpha, beta = tenants
    event_id = (await run(keyed, alpha, RECORD, {"input": {"subjectId": subject, "kind": "k", "payload": {}}}))[
        "recordEvent"
    ]["id"]
    fact_id = (await run(keyed, alpha, ASSERT, {"input": {"subjectId": subject, "predicate": "p", "value": 1}}))[
        "assertFact"
    ]["fact"]["id"]
    a = await keyed.execute(  # the alpha fact joins an alpha conflict, so conflicts(...) has something to hide
        ASSERT, {"input": {"subjectId": subject, "predicate": "p", "value": 2, "mode": "CONTEST"}}, **alpha.auth
    )
    assert a["assertFact"]["conflict"] is not None

    mine = await run(keyed, alpha, READS, {"fact": fact_id, "event": event_id, "s": subject})
    assert mine["fact"] == {"id": fact_id} and mine["event"] == {"id": event_id}
    assert len(mine["facts"]["edges"]) == 2 and len(mine["events"]["edges"]) == 1
    assert len(mine["conflicts"]["edges"]) == 1

    theirs = await run(keyed, beta, READS, {"fact": fact_id, "event": event_id, "s": subject})
    assert theirs == {
        "fact": None,
        "event": None,
        "facts": {"edges": []},
        "events": {"edges": []},
        "conflicts": {"edges": []},
    }
    project_wide = await run(keyed, beta, "{ conflicts(first: 100) { edges { node { id } } } }")
    assert project_wide["conflicts"]["edges"] == []


async def test_writes_naming_another_projects_ids_answer_like_unknown_ids(
    keyed: GraphQLClient, tenants: tuple[Tenant, Tenant], subject: str
) -> None:
    alpha, beta = tenants
    event_id = (await run(keyed, alpha, RECORD, {"input": {"subjectId": subject, "kind": "k", "payload": {}}}))[
        "recordEvent"
    ]["id"]
    a1 = await run(keyed, alpha, ASSERT, {"input": {"subjectId": subject, "predicate": "p", "value": 1}})
    a2 = await run(
        keyed, alpha, ASSERT, {"input": {"subjectId": subject, "predicate": "p", "value": 2, "mode": "CONTEST"}}
    )
    f1, f2 = a1["assertFact"]["fact"]["id"], a2["assertFact"]["fact"]["id"]
    conflict_id = a2["assertFact"]["conflict"]["id"]
    b1 = await run(keyed, beta, ASSERT, {"input": {"subjectId": subject, "predicate": "q", "value": 1, "mode": "ADD"}})
    b2 = await run(keyed, beta, ASSERT, {"input": {"subjectId": subject, "predicate": "r", "value": 1, "mode": "ADD"}})
    g1, g2 = b1["assertFact"]["fact"]["id"], b2["assertFact"]["fact"]["id"]
    beta_conflict = (await run(keyed, beta, OPEN, {"ids": [g1, g2]}))["openConflict"]["id"]
    unknown = str(uuid.uuid4())

    cases: list[tuple[str, Callable[[str], dict[str, Any]], str]] = [
        (RETRACT, lambda x: {"id": x}, f1),
        (OPEN, lambda x: {"ids": [g1, x]}, f1),
        (RESOLVE, lambda x: {"id": x, "keep": f1}, conflict_id),
        (DISMISS, lambda x: {"id": x}, conflict_id),
        (RESOLVE, lambda x: {"id": beta_conflict, "keep": x}, f1),  # keeping a foreign fact
        (
            ASSERT,
            lambda x: {"input": {"subjectId": subject, "predicate": "s", "value": 1, "sourceEventIds": [x]}},
            event_id,
        ),
    ]
    for query, variables, foreign in cases:
        err = await fail(keyed, beta, query, variables(foreign))
        unknown_err = await fail(keyed, beta, query, variables(unknown))
        assert err["extensions"]["code"] in {"NOT_FOUND", "INVALID_INPUT", "ILLEGAL_TRANSITION"}
        same_error(err, unknown_err, foreign, unknown)

    # Alpha's data is untouched.
    for fact_id in (f1, f2):
        state = (await run(keyed, alpha, FACT_STATE, {"id": fact_id}))["fact"]
        assert state["status"] == "ACTIVE" and state["version"] == 1
    open_sets = await run(
        keyed,
        alpha,
        "query($s: String!) { conflicts(subjectId: $s, status: OPEN) { edges { node { id } } } }",
        {"s": subject},
    )
    assert [e["node"]["id"] for e in open_sets["conflicts"]["edges"]] == [conflict_id]
    # Beta's own facts are untouched too (nothing half-written by the failed writes).
    beta_facts = await run(
        keyed, beta, "query($s: String!) { facts(subjectId: $s) { edges { node { id } } } }", {"s": subject}
    )
    assert sorted(e["node"]["id"] for e in beta_facts["facts"]["edges"]) == sorted([g1, g2])


async def test_the_same_subject_and_predicate_in_two_projects_never_interact(
    keyed: GraphQLClient, tenants: tuple[Tenant, Tenant], subject: str
) -> None:
    alpha, beta = tenants
    a = (await run(keyed, alpha, ASSERT, {"input": {"subjectId": subject, "predicate": "lang", "value": "fr"}}))[
        "assertFact"
    ]
    # The same value in beta is a new fact there, not a reinforcement of alpha's.
    b = (await run(keyed, beta, ASSERT, {"input": {"subjectId": subject, "predicate": "lang", "value": "fr"}}))[
        "assertFact"
    ]
    assert a["outcome"] == b["outcome"] == "CREATED" and a["fact"]["id"] != b["fact"]["id"]
    # A different value in beta supersedes only beta's fact.
    c = (await run(keyed, beta, ASSERT, {"input": {"subjectId": subject, "predicate": "lang", "value": "en"}}))[
        "assertFact"
    ]
    assert [f["id"] for f in c["superseded"]] == [b["fact"]["id"]]
    assert (await run(keyed, alpha, FACT_STATE, {"id": a["fact"]["id"]}))["fact"]["status"] == "ACTIVE"
    # CONTEST in alpha opens a set of alpha's facts only.
    d = await run(
        keyed, alpha, ASSERT, {"input": {"subjectId": subject, "predicate": "lang", "value": "de", "mode": "CONTEST"}}
    )
    assert d["assertFact"]["outcome"] == "CONFLICT_OPENED"
    members = await run(
        keyed,
        alpha,
        "query($s: String!) { conflicts(subjectId: $s) { edges { node { facts { id } } } } }",
        {"s": subject},
    )
    (edge,) = members["conflicts"]["edges"]
    assert sorted(f["id"] for f in edge["node"]["facts"]) == sorted([a["fact"]["id"], d["assertFact"]["fact"]["id"]])


async def test_data_written_with_a_key_belongs_to_its_project(
    keyed: GraphQLClient, runtime: Runtime, tenants: tuple[Tenant, Tenant], subject: str
) -> None:
    alpha, _ = tenants
    event_id = (await run(keyed, alpha, RECORD, {"input": {"subjectId": subject, "kind": "k", "payload": {}}}))[
        "recordEvent"
    ]["id"]
    async with runtime.pool.acquire() as conn:
        assert await conn.fetchval("SELECT project_id FROM events WHERE id = $1", uuid.UUID(event_id)) == alpha.project
        chunk_projects = await conn.fetch(
            "SELECT DISTINCT project_id FROM episode_chunks WHERE event_id = $1", uuid.UUID(event_id)
        )
    assert [r["project_id"] for r in chunk_projects] == [alpha.project]


# ---------------------------------------------------------------- development mode


async def test_dev_mode_without_a_key_uses_the_default_project(
    client: GraphQLClient, runtime: Runtime, subject: str
) -> None:
    response = await client.post(RECORD, {"input": {"subjectId": subject, "kind": "k", "payload": {}}})
    assert response.status_code == 200
    event_id = response.json()["data"]["recordEvent"]["id"]
    async with runtime.pool.acquire() as conn:
        assert await conn.fetchval("SELECT project_id FROM events WHERE id = $1", uuid.UUID(event_id)) == "default"


async def test_dev_mode_with_a_key_uses_the_keys_project(
    client: GraphQLClient, tenants: tuple[Tenant, Tenant], subject: str
) -> None:
    alpha, _ = tenants
    fact_id = (await run(client, alpha, ASSERT, {"input": {"subjectId": subject, "predicate": "p", "value": 1}}))[
        "assertFact"
    ]["fact"]["id"]
    assert (await client.execute(FACT_STATE, {"id": fact_id}))["fact"] is None  # not in "default"
    assert (await run(client, alpha, FACT_STATE, {"id": fact_id}))["fact"]["id"] == fact_id


async def test_dev_mode_still_refuses_a_bad_key(client: GraphQLClient) -> None:
    response = await client.post("{ __typename }", authorization="Bearer hk_nope")
    assert response.status_code == 401
