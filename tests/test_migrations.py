"""Migrations: ordered, recorded, idempotent, safe to run concurrently; the storage of docs/design.md."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
from conftest import GraphQLClient
from contextlib_helpers import assert_fact, record

from haki_context.app import apply_migrations
from haki_context.core.serving.runtime import Runtime
from haki_context.db import migrate

# Tables about the database itself, not any tenant's data: they carry no project_id.
# Tables of the server itself, holding no project's data: their keys need no project_id.
NOT_TENANT_DATA = {"schema_migrations", "server_meta", "background_job_runs"}


def with_database(uri: str, name: str) -> str:
    """The same server URI, pointing at another database."""
    parts = urlsplit(uri)
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))


@pytest.fixture
async def fresh_db(pg_uri: str) -> AsyncIterator[str]:
    """An empty database on the session's server, dropped afterwards."""
    name = f"haki_mig_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(pg_uri)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        yield with_database(pg_uri, name)
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


def test_migration_files_are_numbered_and_ordered() -> None:
    names = [name for name, _ in migrate.available()]
    assert names, "no migrations shipped"
    assert names == sorted(names)
    numbers = [int(name.split("_", 1)[0]) for name in names]
    assert numbers == list(range(1, len(names) + 1)), names


async def test_applying_twice_is_a_no_op(migrated: str) -> None:
    assert await migrate.apply(migrated) == []
    assert await migrate.apply(migrated) == []


async def test_schema_migrations_records_each_file(migrated: str) -> None:
    conn = await asyncpg.connect(migrated)
    try:
        rows = await conn.fetch("SELECT name, applied_at FROM schema_migrations ORDER BY name")
        assert [r["name"] for r in rows] == [name for name, _ in migrate.available()]
        assert all(r["applied_at"] is not None for r in rows)
        assert await migrate.pending(conn) == []
    finally:
        await conn.close()


async def test_a_fresh_database_gets_every_migration_in_order(fresh_db: str) -> None:
    expected = [name for name, _ in migrate.available()]
    conn = await asyncpg.connect(fresh_db)
    try:
        assert await migrate.pending(conn) == expected
    finally:
        await conn.close()
    assert await migrate.apply(fresh_db) == expected
    assert await migrate.apply(fresh_db) == []


def test_a_list_of_migrations_is_summed_up_by_its_count_and_ends() -> None:
    assert migrate.summary(["0001_core.sql"]) == "1 migration (0001_core)"
    assert migrate.summary(["0015_a.sql", "0016_b.sql"]) == "2 migrations (0015_a, 0016_b)"
    assert migrate.summary(["0001_a.sql", "0002_b.sql", "0003_c.sql"]) == "3 migrations (0001_a .. 0003_c)"


async def test_the_first_start_logs_one_short_line_for_every_migration(
    fresh_db: str, caplog: pytest.LogCaptureFixture
) -> None:
    names = [name.removesuffix(".sql") for name, _ in migrate.available()]
    with caplog.at_level(logging.INFO, logger="haki_context"):
        await apply_migrations(fresh_db)
    lines = [r.getMessage() for r in caplog.records if r.name == "haki_context"]
    assert lines == [f"applying {len(names)} migrations ({names[0]} .. {names[-1]})"]
    assert len(lines[0]) < 100
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="haki_context"):
        await apply_migrations(fresh_db)
    assert [r.getMessage() for r in caplog.records if r.name == "haki_context"] == ["the database schema is up to date"]


async def test_concurrent_migrations_apply_each_file_once(fresh_db: str) -> None:
    results = await asyncio.gather(*(migrate.apply(fresh_db) for _ in range(3)))
    expected = [name for name, _ in migrate.available()]
    assert sorted(results, key=len, reverse=True) == [expected, [], []]


async def _indexes(conn: asyncpg.Connection, table: str) -> dict[str, str]:
    rows = await conn.fetch(
        "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' AND tablename = $1", table
    )
    return {r["indexname"]: r["indexdef"] for r in rows}


async def _generated(conn: asyncpg.Connection, table: str, column: str) -> asyncpg.Record | None:
    return await conn.fetchrow(
        "SELECT is_generated, generation_expression FROM information_schema.columns"
        " WHERE table_schema = 'public' AND table_name = $1 AND column_name = $2",
        table,
        column,
    )


@pytest.mark.parametrize("table", ["facts", "episode_chunks"])
async def test_embeddings_have_no_table_wide_hnsw_index(migrated: str, table: str) -> None:
    # Large scopes get partial HNSW indexes of their own (tests/test_scope_indexes.py); an index
    # over every scope served no plan and cost every insert.
    conn = await asyncpg.connect(migrated)
    try:
        defs = (await _indexes(conn, table)).values()
        assert not any("USING hnsw" in d and "WHERE" not in d for d in defs), defs
        dims = await conn.fetchval(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute"
            " WHERE attrelid = $1::regclass AND attname = 'embedding'",
            table,
        )
        assert dims == "vector(384)"
    finally:
        await conn.close()


async def test_embeddings_stay_in_the_row_of_a_long_turn(client: GraphQLClient, runtime: Runtime, subject: str) -> None:
    # ~1,000 characters of text, excerpt and tsvector push the row past TOAST's ~2 kB threshold:
    # with pgvector's default storage the vector would move out of line (a fetch per distance).
    text = " ".join(f"word{i} about the harbour festival" for i in range(30))[:1000]
    (event_id,) = await record(client, subject, [text])
    fact = await assert_fact(client, subject, "long_note", text)
    async with runtime.pool.acquire() as conn:
        chunk = await conn.fetchrow(
            "SELECT pg_column_toast_chunk_id(embedding) AS toasted, pg_column_size(c.*) AS size"
            " FROM episode_chunks c WHERE event_id = $1",
            uuid.UUID(event_id),
        )
        fact_toast = await conn.fetchval(
            "SELECT pg_column_toast_chunk_id(embedding) FROM facts WHERE id = $1", uuid.UUID(fact["fact"]["id"])
        )
    assert chunk["size"] > 2100  # the case TOAST would act on
    assert chunk["toasted"] is None and fact_toast is None


@pytest.mark.parametrize("table", ["facts", "episode_chunks"])
async def test_search_vector_is_generated_english_and_gin_indexed_by_scope(migrated: str, table: str) -> None:
    conn = await asyncpg.connect(migrated)
    try:
        defs = (await _indexes(conn, table)).values()
        assert any("USING gin (haki_scoped_lexemes(project_id, subject_id, search_vector))" in d for d in defs), defs
        row = await _generated(conn, table, "search_vector")
        assert row is not None and row["is_generated"] == "ALWAYS"
        assert "to_tsvector('english'" in row["generation_expression"]
        stored = await conn.fetchval(
            "SELECT attgenerated::text FROM pg_attribute WHERE attrelid = $1::regclass AND attname = 'search_vector'",
            table,
        )
        assert stored == "s"  # STORED
    finally:
        await conn.close()


async def test_scoped_lexemes_fit_in_a_tsvector_whatever_the_row_holds(migrated: str) -> None:
    # Tagging adds 17 bytes a word: a 2,040-byte word and 60,000 distinct words (a fact of
    # ~600 KB of words) must still give a tsvector, or the row's write would fail.
    conn = await asyncpg.connect(migrated)
    try:
        tag = await conn.fetchval("SELECT haki_scope_tag('p', 's')")
        assert len(tag) == 17 and tag.endswith("/")
        long_word = await conn.fetchval(
            "SELECT tsvector_to_array(haki_scoped_lexemes('p', 's', to_tsvector('simple', $1)))",
            "y" * 2040 + " tail",
        )
        assert long_word == [tag + "tail"]
        many = await conn.fetchrow(
            "SELECT length(v) AS n FROM (SELECT haki_scoped_lexemes('p', 's',"
            " array_to_tsvector(ARRAY(SELECT 'word' || lpad(i::text, 6, '0') FROM generate_series(1, 60000) i))) AS v) s"
        )
        assert many["n"] == 1_000_000 // (10 + 17)  # capped (the original held 60,000), not failed
    finally:
        await conn.close()


async def test_every_primary_key_leads_with_project_id(migrated: str) -> None:
    conn = await asyncpg.connect(migrated)
    try:
        rows = await conn.fetch(
            """
            SELECT c.relname AS table_name, a.attname AS first_column
            FROM pg_index i
            JOIN pg_class c ON c.oid = i.indrelid
            JOIN pg_namespace n ON n.oid = c.relnamespace
            JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = i.indkey[0]
            WHERE i.indisprimary AND n.nspname = 'public'
            """
        )
        leading = {r["table_name"]: r["first_column"] for r in rows if r["table_name"] not in NOT_TENANT_DATA}
        for table in ("projects", "api_keys", "events", "episode_chunks", "facts", "conflict_sets", "conflict_members"):
            assert table in leading, f"{table} has no primary key"
        assert {t: c for t, c in leading.items() if c != "project_id"} == {}
        # Every table that holds data carries project_id.
        tables = await conn.fetch(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE'"
        )
        for (table,) in tables:
            if table in NOT_TENANT_DATA:
                continue
            has = await conn.fetchval(
                "SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public'"
                " AND table_name = $1 AND column_name = 'project_id'",
                table,
            )
            assert has == 1, f"{table} has no project_id"
    finally:
        await conn.close()


async def test_active_facts_have_a_unique_backstop_per_value(migrated: str) -> None:
    conn = await asyncpg.connect(migrated)
    try:
        rows = await conn.fetch(
            """
            SELECT pg_get_indexdef(i.indexrelid) AS def, pg_get_expr(i.indpred, i.indrelid) AS predicate
            FROM pg_index i WHERE i.indrelid = 'facts'::regclass AND i.indisunique AND NOT i.indisprimary
            """
        )
        assert any(
            "(project_id, subject_id, predicate, value_hash)" in r["def"] and "ACTIVE" in (r["predicate"] or "")
            for r in rows
        ), rows
    finally:
        await conn.close()


async def test_scope_columns_have_btree_indexes_leading_with_project_id(migrated: str) -> None:
    conn = await asyncpg.connect(migrated)
    try:
        for table in ("events", "episode_chunks", "facts", "conflict_sets"):
            defs = (await _indexes(conn, table)).values()
            assert any("USING btree (project_id, subject_id" in d for d in defs), (table, defs)
    finally:
        await conn.close()


@pytest.mark.parametrize("table", ["facts", "episode_chunks"])
async def test_half_precision_vectors_are_generated_and_covered_by_a_scope_index(migrated: str, table: str) -> None:
    conn = await asyncpg.connect(migrated)
    try:
        defs = (await _indexes(conn, table)).values()
        assert any("btree (project_id, subject_id) INCLUDE (embedding_half" in d for d in defs), defs
        row = await _generated(conn, table, "embedding_half")
        assert row is not None and row["is_generated"] == "ALWAYS"
        assert "halfvec(384)" in row["generation_expression"]
    finally:
        await conn.close()


async def test_full_text_indexes_keep_no_pending_list_after_writes(
    client: GraphQLClient, migrated: str, subject: str
) -> None:
    # A GIN pending list is read whole by every word's lookup (migration 0010): writes must go
    # straight into the posting lists, so none is queued after events and facts are recorded.
    await record(client, subject, [f"Ann planned trip {i} to Lisbon with Bruno" for i in range(5)])
    await assert_fact(client, subject, "home_city", "Lisbon")
    conn = await asyncpg.connect(migrated)
    try:
        await conn.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")
        for index in ("facts_scoped_search", "episode_chunks_scoped_search"):
            options = await conn.fetchval("SELECT reloptions FROM pg_class WHERE relname = $1", index)
            assert "fastupdate=off" in (options or []), (index, options)
            pending = await conn.fetchval("SELECT pending_tuples FROM pgstatginindex($1::regclass)", index)
            assert pending == 0, (index, pending)
    finally:
        await conn.close()


async def test_write_through_migration_flushes_what_earlier_writes_queued(
    client: GraphQLClient, migrated: str, subject: str
) -> None:
    # A database migrated before 0010 carries a pending list: the migration must empty it, not
    # only stop it growing (turning fastupdate off leaves the queued entries until a vacuum).
    index = "episode_chunks_scoped_search"
    (sql,) = [sql for name, sql in migrate.available() if name.startswith("0010_")]
    conn = await asyncpg.connect(migrated)
    try:
        await conn.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")
        await conn.execute(f"ALTER INDEX {index} SET (fastupdate = on)")
        try:
            await record(client, subject, [f"Bruno fixed bike {i} in Porto" for i in range(5)])
            queued = await conn.fetchval("SELECT pending_tuples FROM pgstatginindex($1::regclass)", index)
            assert queued > 0
        finally:
            await conn.execute(sql)
        assert await conn.fetchval("SELECT pending_tuples FROM pgstatginindex($1::regclass)", index) == 0
    finally:
        await conn.close()


# --- history kept (0012): a database the previous version populated, then migrated


async def _migrate_until(dsn: str, last: str) -> None:
    """Apply the shipped migrations up to and including `last`, recorded as `migrate.apply` does."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            "CREATE TABLE schema_migrations (name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for name, sql in migrate.available():
            if name > last:
                break
            async with conn.transaction():
                await conn.execute(sql)
                await conn.execute("INSERT INTO schema_migrations (name) VALUES ($1)", name)
    finally:
        await conn.close()


async def test_history_migration_dates_what_the_previous_version_kept_and_leaves_the_rest_unknown(
    fresh_db: str,
) -> None:
    await _migrate_until(fresh_db, "0011_erasure_and_key_scopes.sql")
    t = {i: datetime(2026, 1, i, tzinfo=UTC) for i in range(1, 10)}
    ids = {name: uuid.uuid4() for name in "ABCDEFGHIJK"}
    conflicts = {name: uuid.uuid4() for name in "XYZ"}
    noon = datetime(2026, 1, 1, 12, tzinfo=UTC)
    # (fact, status, recorded_at, superseded_by, valid_from, valid_to, last_reinforced_at): what
    # the previous write paths left (a supersession cut valid_to, a reinforcement moved its date).
    facts = [
        ("A", "ACTIVE", t[1], None, None, None, t[4]),
        ("B", "SUPERSEDED", t[1], "C", None, t[2], None),  # assertFact SUPERSEDE at t2, by C: cut at t2
        ("C", "ACTIVE", t[2], None, None, None, None),
        ("D", "SUPERSEDED", t[1], "E", None, t[4], None),  # the set X, opened at t3, resolved at t4 keeping E
        ("E", "ACTIVE", t[1], None, None, None, None),
        ("F", "RETRACTED", t[1], None, None, None, None),  # retracted, when unknown
        ("G", "RETRACTED", t[1], "H", None, noon, None),  # valid to noon; superseded by H (t3), then retracted
        ("H", "ACTIVE", t[3], None, t[2], None, None),  # valid from t2: G's noon was before the cut, so kept
        ("I", "ACTIVE", t[1], None, None, None, None),  # the set Y, opened at t5 by J in CONTEST mode
        ("J", "ACTIVE", t[5], None, None, None, None),
        ("K", "ACTIVE", t[6], None, None, None, None),  # joined Y in CONTEST mode at t6
    ]
    sets = [  # (set, status, created_at, resolved_at, kept, members)
        ("X", "RESOLVED", t[3], t[4], "E", "DE"),
        ("Y", "OPEN", t[5], None, None, "IJK"),
        ("Z", "DISMISSED", t[7], t[8], None, "AC"),
    ]
    conn = await asyncpg.connect(fresh_db)
    try:
        for name, status, recorded_at, by, valid_from, valid_to, reinforced in facts:
            await conn.execute(
                "INSERT INTO facts (project_id, id, subject_id, predicate, value, value_hash, status, volatility,"
                " recorded_at, superseded_by, valid_from, valid_to, last_reinforced_at, text, embedding)"
                " VALUES ('p', $1, 's', 'k', $2, $3, $4, 'STABLE', $5, $6, $7, $8, $9,"
                " 'k', array_fill(0.1::real, ARRAY[384])::vector)",
                ids[name],
                f'"{name}"',
                name,
                status,
                recorded_at,
                ids[by] if by else None,
                valid_from,
                valid_to,
                reinforced,
            )
        for name, status, created_at, resolved_at, kept, members in sets:
            await conn.execute(
                "INSERT INTO conflict_sets (project_id, id, subject_id, status, created_at, resolved_at, kept_fact_id)"
                " VALUES ('p', $1, 's', $2, $3, $4, $5)",
                conflicts[name],
                status,
                created_at,
                resolved_at,
                ids[kept] if kept else None,
            )
            for position, member in enumerate(members):
                await conn.execute(
                    "INSERT INTO conflict_members (project_id, conflict_id, position, fact_id) VALUES ('p', $1, $2, $3)",
                    conflicts[name],
                    position,
                    ids[member],
                )
    finally:
        await conn.close()

    assert await migrate.apply(fresh_db) == [n for n, _ in migrate.available() if n > "0011_erasure_and_key_scopes.sql"]

    conn = await asyncpg.connect(fresh_db)
    try:
        rows = await conn.fetch("SELECT id, status, ended_at, end_reason, active_valid_to, reinforced_at FROM facts")
        ends = {next(k for k, v in ids.items() if v == r["id"]): (r["end_reason"], r["ended_at"]) for r in rows}
        assert ends == {
            "A": (None, None),
            "B": ("SUPERSEDED", t[2]),  # when its successor was recorded
            "C": (None, None),
            "D": ("SUPERSEDED", t[4]),  # when its set was resolved, not when E was recorded
            "E": (None, None),
            "F": ("RETRACTED", None),  # the instant of a retraction was never kept
            "G": ("SUPERSEDED", t[3]),  # it stopped being served when superseded
            "H": (None, None),
            "I": (None, None),
            "J": (None, None),
            "K": (None, None),
        }
        # The validTo each superseded fact had while ACTIVE: kept where the cut left it, else open-ended.
        while_active = {name: r["active_valid_to"] for name, r in zip(_names(rows, ids), rows, strict=True)}
        assert {n: while_active[n] for n in "BDG"} == {"B": None, "D": None, "G": noon}
        reinforcements = {name: r["reinforced_at"] for name, r in zip(_names(rows, ids), rows, strict=True)}
        assert reinforcements == {name: ([t[4]] if name == "A" else []) for name in ids}

        joined = await conn.fetch("SELECT conflict_id, fact_id, added_at FROM conflict_members")
        added = {
            (
                next(k for k, v in conflicts.items() if v == r["conflict_id"]),
                next(k for k, v in ids.items() if v == r["fact_id"]),
            ): r["added_at"]
            for r in joined
        }
        assert added == {
            ("X", "D"): t[3],
            ("X", "E"): t[3],
            ("Y", "I"): t[5],
            ("Y", "J"): t[5],
            ("Y", "K"): t[6],  # recorded after the set opened: it joined then
            ("Z", "A"): t[7],
            ("Z", "C"): t[7],
        }
        # From now on the columns hold: an ACTIVE fact has no end, a member always has its instant.
        with pytest.raises(asyncpg.CheckViolationError):
            await conn.execute("UPDATE facts SET end_reason = 'RETRACTED' WHERE id = $1", ids["A"])
        with pytest.raises(asyncpg.CheckViolationError):
            await conn.execute("UPDATE facts SET status = 'RETRACTED' WHERE id = $1", ids["C"])
        with pytest.raises(asyncpg.NotNullViolationError):
            await conn.execute(
                "INSERT INTO conflict_members (project_id, conflict_id, position, fact_id) VALUES ('p', $1, 9, $2)",
                conflicts["Y"],
                ids["A"],
            )
    finally:
        await conn.close()


def _names(rows: list[asyncpg.Record], ids: dict[str, uuid.UUID]) -> list[str]:
    by_id = {v: k for k, v in ids.items()}
    return [by_id[r["id"]] for r in rows]
