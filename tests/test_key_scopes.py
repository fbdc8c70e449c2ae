"""Key scopes: `read` for every query (`context` included, which writes its trace), `write` for
the mutations that record or change memory, `erase` for forgetSubject; FORBIDDEN otherwise."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from conftest import GraphQLClient, ProjectClient, client_for, make_settings
from graphql import build_schema

from haki_context.core.errors import Forbidden
from haki_context.core.serving import keys
from haki_context.core.serving.auth import Authenticator, Caller, Origin, Scope
from haki_context.core.serving.runtime import Runtime
from haki_context.db import keys as db_keys
from haki_context.schema import export_sdl

CLI = str(Path(sys.executable).with_name("haki-context"))
ANY_ID = str(uuid.uuid4())

# One valid operation per root field: a new field must be added here, or the coverage test fails.
QUERIES: dict[str, str] = {
    "context": '{ context(subjectId: "s", query: "q") { traceId } }',
    "trace": f'{{ trace(id: "{ANY_ID}") {{ id }} }}',
    "traces": "{ traces { edges { node { id } } } }",
    "fact": f'{{ fact(id: "{ANY_ID}") {{ id }} }}',
    "facts": '{ facts(subjectId: "s") { edges { node { id } } } }',
    "event": f'{{ event(id: "{ANY_ID}") {{ id }} }}',
    "events": '{ events(subjectId: "s") { edges { node { id } } } }',
    "conflicts": "{ conflicts { edges { node { id } } } }",
    "stats": "{ stats { contextCalls } }",
    "statsSeries": '{ statsSeries(since: "2026-01-01T00:00:00Z", bucket: WEEK) { contextCalls } }',
    "replay": f'{{ replay(traceId: "{ANY_ID}") {{ asOf }} }}',
}
MUTATIONS: dict[str, str] = {
    "recordEvent": 'mutation { recordEvent(input: {subjectId: "s", kind: "k", payload: {}}) { id } }',
    "recordEvents": 'mutation { recordEvents(inputs: [{subjectId: "s", kind: "k", payload: {}}]) { id } }',
    "assertFact": 'mutation { assertFact(input: {subjectId: "s", predicate: "p", value: 1}) { outcome } }',
    "retractFact": f'mutation {{ retractFact(id: "{ANY_ID}") {{ id }} }}',
    "openConflict": f'mutation {{ openConflict(factIds: ["{ANY_ID}", "{uuid.uuid4()}"]) {{ id }} }}',
    "resolveConflict": f'mutation {{ resolveConflict(id: "{ANY_ID}", keepFactId: "{ANY_ID}") {{ id }} }}',
    "dismissConflict": f'mutation {{ dismissConflict(id: "{ANY_ID}") {{ id }} }}',
    "forgetSubject": 'mutation { forgetSubject(subjectId: "s") { events } }',
}
NEEDS = {**dict.fromkeys(QUERIES, "read"), **dict.fromkeys(MUTATIONS, "write"), "forgetSubject": "erase"}


async def scoped(rt: Runtime, *scopes: str, project_id: str | None = None) -> ProjectClient:
    project_id = project_id or f"project-{uuid.uuid4().hex[:12]}"
    new = keys.generate()
    async with rt.pool.acquire() as conn:
        await db_keys.insert_key(
            conn, project_id, key_id=new.key_id, key_hash=new.key_hash, prefix=new.prefix, name=None, scopes=scopes
        )
    base = client_for(rt, make_settings(rt.settings.database_url or "", dev_mode=False))
    return ProjectClient(base.http, new.plain, project_id)


def test_every_root_field_has_a_scope_check_case() -> None:
    schema = build_schema(export_sdl())
    assert schema.query_type is not None and schema.mutation_type is not None
    assert set(schema.query_type.fields) == set(QUERIES)
    assert set(schema.mutation_type.fields) == set(MUTATIONS)


@pytest.mark.parametrize(
    "held", [("read",), ("write",), ("erase",), ("read", "write"), ("read", "write", "erase")], ids="+".join
)
async def test_each_root_field_answers_only_a_key_holding_its_scope(runtime: Runtime, held: tuple[str, ...]) -> None:
    client = await scoped(runtime, *held)
    try:
        for name, operation in {**QUERIES, **MUTATIONS}.items():
            body = (await client.post(operation)).json()
            codes = [e["extensions"]["code"] for e in body.get("errors") or []]
            if NEEDS[name] in held:
                assert "FORBIDDEN" not in codes, (name, held, body)
            else:
                assert codes == ["FORBIDDEN"], (name, held, body)
                assert f"`{NEEDS[name]}` scope" in body["errors"][0]["message"]
    finally:
        await client.http.aclose()


async def test_a_read_only_key_gets_context_and_its_trace_but_writes_nothing(runtime: Runtime, subject: str) -> None:
    writer = await scoped(runtime, "read", "write")
    reader = await scoped(runtime, "read", project_id=writer.project_id)
    try:
        await writer.execute(
            'mutation($s: String!) { assertFact(input: {subjectId: $s, predicate: "city", value: "Lyon"}) { outcome } }',
            {"s": subject},
        )
        packet = (
            await reader.execute(
                'query($s: String!) { context(subjectId: $s, query: "city") { traceId facts { value } } }',
                {"s": subject},
            )
        )["context"]
        assert [f["value"] for f in packet["facts"]] == ["Lyon"]
        trace = await reader.execute("query($id: ID!) { trace(id: $id) { id } }", {"id": packet["traceId"]})
        assert trace["trace"] == {"id": packet["traceId"]}

        response = await reader.post(
            'mutation($s: String!) { a: recordEvent(input: {subjectId: $s, kind: "k", payload: {}}) { id } }',
            {"s": subject},
        )
        assert response.status_code == 200  # a field's error: the request itself was served
        body = response.json()
        assert body["errors"][0]["extensions"]["code"] == "FORBIDDEN" and body["data"] is None
        events = await writer.execute(
            "query($s: String!) { events(subjectId: $s) { edges { node { id } } } }", {"s": subject}
        )
        assert events["events"]["edges"] == []
    finally:
        await writer.http.aclose()
        await reader.http.aclose()


async def test_keys_made_before_scopes_existed_read_and_write_but_do_not_erase(runtime: Runtime) -> None:
    project_id = f"project-{uuid.uuid4().hex[:12]}"
    new = keys.generate()
    async with runtime.pool.acquire() as conn:
        await db_keys.ensure_project(conn, project_id)
        # As an earlier version wrote it: no scopes column named, the migration's default applies.
        await conn.execute(
            "INSERT INTO api_keys (project_id, key_id, key_hash, prefix) VALUES ($1, $2, $3, $4)",
            project_id,
            new.key_id,
            new.key_hash,
            new.prefix,
        )
    caller = await Authenticator(runtime, dev_mode=False).caller_for(f"Bearer {new.plain}")
    assert caller == Caller(project_id, frozenset({Scope.READ, Scope.WRITE}), new.key_id, Origin.KEY)
    with pytest.raises(Forbidden):
        caller.require(Scope.ERASE)


async def test_development_mode_acts_with_every_scope(client: GraphQLClient, subject: str) -> None:
    data = await client.execute("mutation($s: String!) { forgetSubject(subjectId: $s) { subjectId } }", {"s": subject})
    assert data["forgetSubject"]["subjectId"] == subject


def cli(pg_uri: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HAKI_")}
    env["HAKI_DATABASE_URL"] = pg_uri
    return subprocess.run([CLI, *args], env=env, capture_output=True, text=True, timeout=120, check=False)


def created_key(result: subprocess.CompletedProcess[str]) -> tuple[str, str]:
    assert result.returncode == 0, result.stderr
    return result.stdout.split()[2], result.stdout.strip().splitlines()[-1]


async def test_keys_create_grants_the_scopes_named_and_read_write_by_default(
    runtime: Runtime, migrated: str, subject: str
) -> None:
    project = f"project-{uuid.uuid4().hex[:12]}"
    default_id, default_key = created_key(cli(migrated, "keys", "create", "--project", project))
    eraser_id, eraser_key = created_key(
        cli(migrated, "keys", "create", "--project", project, "--scope", "erase", "--scope", "read")
    )
    listing = cli(migrated, "keys", "list", "--project", project).stdout.splitlines()
    assert [line.split()[-1] for line in listing if default_id in line] == ["read,write"]
    assert [line.split()[-1] for line in listing if eraser_id in line] == ["erase,read"]

    authenticator = Authenticator(runtime, dev_mode=False)
    assert (await authenticator.caller_for(f"Bearer {default_key}")).scopes == {Scope.READ, Scope.WRITE}
    assert (await authenticator.caller_for(f"Bearer {eraser_key}")).scopes == {Scope.READ, Scope.ERASE}

    unknown = cli(migrated, "keys", "create", "--project", project, "--scope", "admin")
    assert unknown.returncode == 2 and "invalid choice: 'admin'" in unknown.stderr
