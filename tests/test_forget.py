"""forgetSubject: everything a project holds about a subject goes, in one transaction, with one
audit record that holds no content; every other subject and project keeps its memory."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from conftest import GraphQLClient, ProjectClient, client_for
from contextlib_helpers import assert_fact, context, record

from haki_context.core.serving import keys
from haki_context.core.serving.runtime import Runtime
from haki_context.db import keys as db_keys
from haki_context.db import scope_indexes as db_scope_indexes

FORGET = """
mutation($s: String!) {
  forgetSubject(subjectId: $s) {
    erasureId subjectId forgottenAt events episodeChunks facts conflictSets conflictMembers
    traces traceDecisions scopeLexemes scopeIndexes
  }
}
"""

CLI = str(Path(sys.executable).with_name("haki-context"))

# Tables about the database itself or the project as a whole, which name no subject.
NOT_SUBJECT_DATA = {"schema_migrations", "server_meta", "projects", "api_keys", "erasures"}


async def project_key(rt: Runtime, project_id: str, scopes: tuple[str, ...]) -> tuple[str, str]:
    """A new key of `project_id` with `scopes`: (plain key, key id)."""
    new = keys.generate()
    async with rt.pool.acquire() as conn:
        await db_keys.insert_key(
            conn, project_id, key_id=new.key_id, key_hash=new.key_hash, prefix=new.prefix, name=None, scopes=scopes
        )
    return new.plain, new.key_id


@pytest.fixture
async def eraser(runtime: Runtime) -> AsyncIterator[ProjectClient]:
    """A client of a fresh project whose key may read, write and erase."""
    project_id = f"project-{uuid.uuid4().hex[:12]}"
    key, _ = await project_key(runtime, project_id, ("read", "write", "erase"))
    base = client_for(runtime)
    yield ProjectClient(base.http, key, project_id)
    await base.http.aclose()


async def fill(client: GraphQLClient, subject: str) -> dict[str, list[str]]:
    """A conversation, facts in every status, a resolved and an open conflict, and two traces.
    Returns the ids written, by kind."""
    events = await record(
        client, subject, ["Please send my invoices in French.", "I moved to Lyon last spring.", "My cat is Miso."]
    )
    facts = [
        (await assert_fact(client, subject, "invoice_language", "English", sourceEventIds=[events[0]]))["fact"]["id"],
        (await assert_fact(client, subject, "invoice_language", "French", sourceEventIds=[events[0]]))["fact"]["id"],
        (await assert_fact(client, subject, "city", "Paris"))["fact"]["id"],
    ]
    contested = await assert_fact(client, subject, "city", "Lyon", mode="CONTEST", sourceEventIds=[events[1]])
    facts.append(contested["fact"]["id"])
    pet = (await assert_fact(client, subject, "pet", "cat"))["fact"]["id"]
    dog = (await assert_fact(client, subject, "pet", "dog", mode="ADD"))["fact"]["id"]
    facts += [pet, dog]
    opened = await client.execute("mutation($ids: [ID!]!) { openConflict(factIds: $ids) { id } }", {"ids": [pet, dog]})
    resolved = opened["openConflict"]["id"]
    await client.execute(
        "mutation($id: ID!, $k: ID!) { resolveConflict(id: $id, keepFactId: $k) { id } }", {"id": resolved, "k": pet}
    )
    retracted = (await assert_fact(client, subject, "nickname", "Annie"))["fact"]["id"]
    await client.execute('mutation($id: ID!) { retractFact(id: $id, reason: "asked") { id } }', {"id": retracted})
    facts.append(retracted)
    traces = [
        (await context(client, subject, "Which language for invoices?"))["traceId"],
        (await context(client, subject, "Where does Ann live?"))["traceId"],
    ]
    return {
        "events": events,
        "facts": facts,
        "conflicts": [contested["conflict"]["id"], resolved],
        "traces": traces,
    }


async def leftovers(rt: Runtime, project_id: str, subject: str, ids: list[str]) -> list[str]:
    """Every row of the project, in any table, that still names the subject or one of `ids`.

    Tables are found from information_schema, so a table added later is checked too: a
    `subject_id` column equal to the subject, any uuid (or uuid[]) column holding one of the
    ids (child tables such as conflict_members and trace_decisions), and any text or JSON
    column holding the subject's id as text."""
    found: list[str] = []
    async with rt.pool.acquire() as conn:
        columns = await conn.fetch(
            "SELECT c.table_name, c.column_name, c.data_type, c.udt_name FROM information_schema.columns c"
            " JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name"
            " WHERE c.table_schema = current_schema() AND t.table_type = 'BASE TABLE'"
            " ORDER BY c.table_name, c.ordinal_position"
        )
        by_table: dict[str, list[asyncpg.Record]] = {}
        for col in columns:
            by_table.setdefault(col["table_name"], []).append(col)
        assert {"events", "facts", "episode_chunks", "context_traces", "trace_decisions"} <= set(by_table)
        for table, cols in by_table.items():
            if table in NOT_SUBJECT_DATA:
                continue
            names = {c["column_name"] for c in cols}
            scope = "project_id = $1" if "project_id" in names else "$1::text IS NOT NULL"
            tests: list[str] = []
            for c in cols:
                name, kind, udt = c["column_name"], c["data_type"], c["udt_name"]
                if name == "subject_id":
                    tests.append("subject_id = $2")
                elif udt == "uuid":
                    tests.append(f'"{name}" = ANY($3::uuid[])')
                elif udt == "_uuid":
                    tests.append(f'"{name}" && $3::uuid[]')
                elif kind in ("text", "character varying", "jsonb", "json") or udt == "_text":
                    tests.append(f'strpos("{name}"::text, $2) > 0')
            if not tests:
                continue
            # Every statement names all three parameters, whichever columns it tests.
            bound = "$2::text IS NOT NULL AND $3::uuid[] IS NOT NULL"
            sql = f'SELECT count(*) FROM "{table}" WHERE {bound} AND {scope} AND ({" OR ".join(tests)})'
            n = await conn.fetchval(sql, project_id, subject, ids)
            if n:
                found.append(f"{table}: {n} row(s)")
    return found


async def test_forget_deletes_every_row_about_the_subject_in_every_table(
    eraser: ProjectClient, runtime: Runtime, subject: str
) -> None:
    written = await fill(eraser, subject)
    ids = [i for kind in written.values() for i in kind]
    assert await leftovers(runtime, eraser.project_id, subject, ids), "the check must see the rows before the forget"

    counts = (await eraser.execute(FORGET, {"s": subject}))["forgetSubject"]

    assert await leftovers(runtime, eraser.project_id, subject, ids) == []
    assert counts["subjectId"] == subject
    assert counts["events"] == 3 and counts["episodeChunks"] >= 3
    assert counts["facts"] == len(written["facts"])
    assert counts["conflictSets"] == 2 and counts["conflictMembers"] == 4
    assert counts["traces"] == 2 and counts["traceDecisions"] > 0
    assert counts["scopeIndexes"] == 0  # a small subject has no index of its own


async def test_after_a_forget_every_read_of_the_subject_is_empty(eraser: ProjectClient, subject: str) -> None:
    written = await fill(eraser, subject)
    await eraser.execute(FORGET, {"s": subject})

    packet = await context(eraser, subject, "Which language for invoices?")
    assert packet["facts"] == [] and packet["episodes"] == [] and packet["trace"]["decisions"] == []
    data = await eraser.execute(
        """query($s: String!, $f: ID!, $e: ID!, $t: ID!) {
             facts(subjectId: $s) { edges { node { id } } }
             events(subjectId: $s) { edges { node { id } } }
             traces(subjectId: $s) { edges { node { id } } }
             conflicts(subjectId: $s) { edges { node { id } } }
             fact(id: $f) { id } event(id: $e) { id } trace(id: $t) { id } }""",
        {
            "s": subject,
            "f": written["facts"][0],
            "e": written["events"][0],
            "t": written["traces"][0],
        },
    )
    # The one trace left is the context call above, made after the forget.
    assert [e["node"]["id"] for e in data["traces"]["edges"]] == [packet["traceId"]]
    assert data["facts"]["edges"] == data["events"]["edges"] == data["conflicts"]["edges"] == []
    assert data["fact"] is None and data["event"] is None and data["trace"] is None


async def test_forget_leaves_other_subjects_and_other_projects_whole(
    eraser: ProjectClient, client: GraphQLClient, subject: str
) -> None:
    other = f"{subject}-other"
    await fill(eraser, subject)
    kept = await fill(eraser, other)
    elsewhere = await fill(client, subject)  # the same subject id in the development project

    await eraser.execute(FORGET, {"s": subject})

    for c, written in ((eraser, kept), (client, elsewhere)):
        s = other if c is eraser else subject
        data = await c.execute(
            "query($s: String!) { facts(subjectId: $s, first: 100) { edges { node { id } } }"
            " events(subjectId: $s) { edges { node { id } } } }",
            {"s": s},
        )
        assert sorted(e["node"]["id"] for e in data["facts"]["edges"]) == sorted(written["facts"])
        assert sorted(e["node"]["id"] for e in data["events"]["edges"]) == sorted(written["events"])
        packet = await context(c, s, "Which language for invoices?")
        assert packet["facts"], "the other subject's memory is still served"


async def test_forget_writes_one_audit_record_without_the_subject_or_content(runtime: Runtime, subject: str) -> None:
    project_id = f"project-{uuid.uuid4().hex[:12]}"
    key, key_id = await project_key(runtime, project_id, ("read", "write", "erase"))
    base = client_for(runtime)
    c = ProjectClient(base.http, key, project_id)
    try:
        await fill(c, subject)
        counts = (await c.execute(FORGET, {"s": subject}))["forgetSubject"]
    finally:
        await base.http.aclose()

    async with runtime.pool.acquire() as conn:
        rows = await conn.fetch("SELECT * FROM erasures WHERE project_id = $1", project_id)
    assert len(rows) == 1
    row = dict(rows[0])
    assert str(row["id"]) == counts["erasureId"]
    assert row["subject_hash"] == hashlib.sha256(f"{project_id}\x1f{subject}".encode()).digest()
    assert str(row["key_id"]) == key_id and row["actor"] == "key"
    assert row["counts"]["events"] == counts["events"] and row["counts"]["facts"] == counts["facts"]
    assert subject not in repr(row) and "French" not in repr(row) and "Lyon" not in repr(row)


async def test_forgetting_a_subject_that_holds_nothing_is_recorded_with_zero_counts(
    eraser: ProjectClient, subject: str
) -> None:
    counts = (await eraser.execute(FORGET, {"s": subject}))["forgetSubject"]
    assert _scalar_counts(counts) == dict.fromkeys(
        [
            "events",
            "episodeChunks",
            "facts",
            "conflictSets",
            "conflictMembers",
            "traces",
            "traceDecisions",
            "scopeLexemes",
            "scopeIndexes",
        ],
        0,
    )


async def test_the_command_line_says_when_a_subject_held_nothing_and_records_the_forget(
    runtime: Runtime, migrated: str, subject: str
) -> None:
    project_id = f"project-{uuid.uuid4().hex[:12]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HAKI_")}
    env.update({"HAKI_DATABASE_URL": migrated, "HAKI_EMBED_PROVIDER": "hashing"})
    result = subprocess.run(
        [CLI, "forget", "--project", project_id, "--subject", subject],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    async with runtime.pool.acquire() as conn:
        erasure_id = await conn.fetchval("SELECT id FROM erasures WHERE project_id = $1", project_id)
    assert result.stdout.splitlines() == [
        f"nothing held for subject {subject!r} of project {project_id!r}; the forget is recorded all the same:"
        f" audit record {erasure_id}"
    ]


@pytest.mark.parametrize("bad", ["", "x" * 129])
async def test_forget_refuses_a_malformed_subject_id(eraser: ProjectClient, bad: str) -> None:
    error = await eraser.error(FORGET, {"s": bad})
    assert error["extensions"]["code"] == "INVALID_INPUT"


async def test_forget_drops_the_subjects_own_vector_indexes_and_common_lexemes(
    eraser: ProjectClient, runtime: Runtime, subject: str
) -> None:
    await fill(eraser, subject)
    scope = db_scope_indexes.Scope(eraser.project_id, subject, "facts", 7)
    async with runtime.pool.acquire() as conn:
        await db_scope_indexes.build(conn, scope, ivf_rows=1)  # both kinds, as a large scope gets
        await conn.execute(
            "INSERT INTO scope_lexemes (project_id, subject_id, table_name, lexeme, df) VALUES ($1, $2, 'facts', 'french', 1)",
            eraser.project_id,
            subject,
        )
    names = [db_scope_indexes.index_name("facts", eraser.project_id, subject, k) for k in db_scope_indexes.IndexKind]
    assert await _existing_indexes(runtime, names) == sorted(names)

    counts = (await eraser.execute(FORGET, {"s": subject}))["forgetSubject"]

    assert counts["scopeIndexes"] == 2 and counts["scopeLexemes"] == 1
    assert await _existing_indexes(runtime, names) == []


async def _existing_indexes(rt: Runtime, names: list[str]) -> list[str]:
    async with rt.pool.acquire() as conn:
        rows = await conn.fetch("SELECT relname FROM pg_class WHERE relname = ANY($1::text[]) ORDER BY relname", names)
    return [r["relname"] for r in rows]


def _scalar_counts(counts: dict[str, Any]) -> dict[str, int]:
    return {k: v for k, v in counts.items() if isinstance(v, int)}


async def test_the_index_builder_drops_scope_indexes_left_by_a_forgotten_subject(
    eraser: ProjectClient, runtime: Runtime, subject: str
) -> None:
    """A forget that raced a build of the subject's index (or could not drop it) leaves an index
    no entry owns: the builder's next pass drops it, and keeps every owned one."""
    from haki_context.core.serving.scope_indexes import build_pending

    kept_subject = f"{subject}-kept"
    await fill(eraser, subject)
    await fill(eraser, kept_subject)
    async with runtime.pool.acquire() as conn:
        for s in (subject, kept_subject):
            await db_scope_indexes.build(conn, db_scope_indexes.Scope(eraser.project_id, s, "facts", 7))
        # The forget's own drop missed it: the entry is gone, the index is still there.
        await conn.execute(
            "DELETE FROM scope_vector_indexes WHERE project_id = $1 AND subject_id = $2", eraser.project_id, subject
        )
    orphan = db_scope_indexes.index_name("facts", eraser.project_id, subject)
    owned = db_scope_indexes.index_name("facts", eraser.project_id, kept_subject)
    assert await _existing_indexes(runtime, [orphan, owned]) == sorted([orphan, owned])

    # A threshold no scope reaches: the pass builds nothing, only sweeps.
    await build_pending(runtime.pool, 10**12)

    assert await _existing_indexes(runtime, [orphan, owned]) == [owned]
    async with runtime.pool.acquire() as conn:  # leave no index behind for the other tests
        await conn.execute(
            "DELETE FROM scope_vector_indexes WHERE project_id = $1 AND subject_id = $2",
            eraser.project_id,
            kept_subject,
        )
    await build_pending(runtime.pool, 10**12)
    assert await _existing_indexes(runtime, [owned]) == []


async def test_an_index_build_of_a_subject_forgotten_since_it_was_listed_creates_nothing(
    eraser: ProjectClient, runtime: Runtime, subject: str
) -> None:
    await fill(eraser, subject)
    scope = db_scope_indexes.Scope(eraser.project_id, subject, "facts", 7)  # listed while it held rows
    await eraser.execute(FORGET, {"s": subject})
    async with runtime.pool.acquire() as conn:
        await db_scope_indexes.build(conn, scope)
        entries = await conn.fetchval(
            "SELECT count(*) FROM scope_vector_indexes WHERE project_id = $1 AND subject_id = $2",
            eraser.project_id,
            subject,
        )
    assert entries == 0
    assert await _existing_indexes(runtime, [db_scope_indexes.index_name("facts", eraser.project_id, subject)]) == []
