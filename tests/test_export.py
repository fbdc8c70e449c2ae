"""Export and import of a subject: JSON lines over GET /export and the command line, loaded into
another project with every input rule, giving the same context packets."""

from __future__ import annotations

import difflib
import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import GraphQLClient, ProjectClient, client_for, make_settings
from contextlib_helpers import assert_fact, context, record
from test_forget import project_key

from haki_context.core.errors import Forbidden, InvalidInput
from haki_context.core.memory.portability import export_lines, import_lines
from haki_context.core.serving.auth import Caller
from haki_context.core.serving.runtime import Runtime

CLI = str(Path(sys.executable).with_name("haki-context"))

QUERIES = [
    "Which language should invoices use?",
    "Where does Ann live?",
    "What pet does Ann have?",
    "What did Ann say about the meeting on Tuesday?",
    "nickname",
]


async def keyed(rt: Runtime, scopes: tuple[str, ...], project_id: str | None = None) -> ProjectClient:
    project_id = project_id or f"project-{uuid.uuid4().hex[:12]}"
    key, _ = await project_key(rt, project_id, scopes)
    base = client_for(rt, make_settings(rt.settings.database_url or "", dev_mode=False))
    return ProjectClient(base.http, key, project_id)


@pytest.fixture
async def source(runtime: Runtime) -> AsyncIterator[ProjectClient]:
    c = await keyed(runtime, ("read", "write"))
    yield c
    await c.http.aclose()


async def remember(client: GraphQLClient, subject: str) -> None:
    """A conversation and facts in every state: superseded, open conflict, retracted, volatile, with sources."""
    turns = await record(
        client,
        subject,
        [
            "Please send my invoices in French from now on.",
            "I moved from Paris to Lyon last spring.",
            "The meeting on Tuesday is moved to 3 pm, please tell the team.",
            "My cat Miso is sick, so I work from home this week.",
        ],
    )
    await client.execute(
        "mutation($i: EventInput!) { recordEvent(input: $i) { id } }",
        {
            "i": {
                "subjectId": subject,
                "kind": "conversation.transcript",
                "occurredAt": "2025-03-01T09:30:00+00:00",
                "payload": {
                    "messages": [
                        {"speaker": "Ann", "text": "Call me Annie, everyone does."},
                        {"speaker": "Agent", "text": "Sure, Annie."},
                    ]
                },
            }
        },
    )
    await assert_fact(client, subject, "invoice_language", "English", confidence=0.6)
    await assert_fact(client, subject, "invoice_language", "French", sourceEventIds=[turns[0]], confidence=0.9)
    await assert_fact(client, subject, "city", "Paris", validFrom="2020-01-01T00:00:00+00:00")
    await assert_fact(client, subject, "city", "Lyon", mode="CONTEST", sourceEventIds=[turns[1]])
    await assert_fact(client, subject, "pet", {"kind": "cat", "name": "Miso"}, volatility="SLOW")
    await assert_fact(client, subject, "works_from", "home", volatility="EPHEMERAL", sourceEventIds=[turns[3]])
    nickname = await assert_fact(client, subject, "nickname", "Nana")
    await client.execute(
        'mutation($id: ID!) { retractFact(id: $id, reason: "wrong person") { id } }', {"id": nickname["fact"]["id"]}
    )
    await assert_fact(client, subject, "nickname", "Annie")


async def export_over_http(client: ProjectClient, subject: str) -> list[dict[str, Any]]:
    response = await client.http.get(
        "/export", params={"subjectId": subject}, headers={"authorization": f"Bearer {client.key}"}
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/x-ndjson")
    return [orjson.loads(line) for line in response.content.splitlines()]


def without_ids(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records with every id replaced by its first-seen rank, so two exports compare by content."""
    ranks: dict[str, int] = {}

    def rank(value: Any) -> Any:
        if isinstance(value, str) and value in ids:
            return ranks.setdefault(value, len(ranks))
        if isinstance(value, list):
            return [rank(v) for v in value]
        return value

    ids = {r["id"] for r in records if "id" in r}
    out = []
    for r in records[1:]:
        out.append({k: rank(v) for k, v in r.items()})
    return out


async def packets(client: GraphQLClient, subject: str) -> list[dict[str, Any]]:
    selection = """rendered usedTokens facts { predicate value reasonCode validFrom validTo }
                   episodes { excerpt occurredAt chunk kind }
                   trace { decisions { itemKind decision reasonCode } }"""
    return [await context(client, subject, q, selection=selection) for q in QUERIES]


async def test_a_round_trip_gives_the_same_context_packets(
    source: ProjectClient, runtime: Runtime, subject: str
) -> None:
    await remember(source, subject)
    exported = await export_over_http(source, subject)
    kinds = [r.get("type", "header") for r in exported]
    assert kinds == ["header"] + ["event"] * 5 + ["fact"] * 8 + ["conflict"] + ["end"]
    assert exported[-1] == {"type": "end", "events": 5, "facts": 8, "conflicts": 1}
    statuses = sorted(r["status"] for r in exported if r.get("type") == "fact")
    assert statuses == ["ACTIVE"] * 6 + ["RETRACTED", "SUPERSEDED"]

    target = await keyed(runtime, ("read", "write"))
    try:
        lines = [orjson.dumps(r) + b"\n" for r in exported]
        counts = await import_lines(runtime, Caller.operator(target.project_id), lines)
        assert (counts.subject_id, counts.events, counts.facts, counts.conflict_sets) == (subject, 5, 8, 1)

        before, after = await packets(source, subject), await packets(target, subject)
        for b, a in zip(before, after, strict=True):
            diff = difflib.unified_diff(json.dumps(b, indent=1).splitlines(), json.dumps(a, indent=1).splitlines())
            assert a == b, "\n".join(diff)
        assert any(p["facts"] for p in after) and any(p["episodes"] for p in after)
        blocked = [d for p in after for d in p["trace"]["decisions"] if d["reasonCode"] == "CONFLICT_OPEN"]
        assert blocked, "the open conflict still blocks its facts after the import"
        # Exported again, the target holds the same records: only the ids are new.
        again = await export_over_http(target, subject)
        assert without_ids(again) == without_ids(exported)
        assert {r["id"] for r in again if "id" in r}.isdisjoint({r["id"] for r in exported if "id" in r})
    finally:
        await target.http.aclose()


async def test_an_import_under_another_subject_of_the_same_project_keeps_the_original(
    source: ProjectClient, runtime: Runtime, subject: str
) -> None:
    await remember(source, subject)
    exported = await export_over_http(source, subject)
    copy = f"{subject}-copy"
    counts = await import_lines(
        runtime, Caller.operator(source.project_id), [orjson.dumps(r) for r in exported], subject_id=copy
    )
    assert counts.subject_id == copy
    assert without_ids(await export_over_http(source, copy))[1:] == without_ids(exported)[1:]
    assert (await packets(source, copy)) == (await packets(source, subject))


async def test_the_export_of_another_projects_subject_is_empty(
    source: ProjectClient, runtime: Runtime, subject: str
) -> None:
    await remember(source, subject)
    other = await keyed(runtime, ("read", "write", "erase"))
    try:
        records = await export_over_http(other, subject)
    finally:
        await other.http.aclose()
    assert [r.get("type", "header") for r in records] == ["header", "end"]
    assert records[-1] == {"type": "end", "events": 0, "facts": 0, "conflicts": 0}


async def test_export_refusals_come_before_any_line_with_their_status(
    source: ProjectClient, runtime: Runtime, subject: str
) -> None:
    writer = await keyed(runtime, ("write",), source.project_id)
    try:
        cases = [
            ({}, {"subjectId": subject}, 401, "UNAUTHENTICATED"),
            ({"authorization": "Bearer hk_not-a-key"}, {"subjectId": subject}, 401, "UNAUTHENTICATED"),
            ({"authorization": f"Bearer {writer.key}"}, {"subjectId": subject}, 403, "FORBIDDEN"),
            ({"authorization": f"Bearer {source.key}"}, {}, 400, "INVALID_INPUT"),
            ({"authorization": f"Bearer {source.key}"}, {"subjectId": "x" * 129}, 400, "INVALID_INPUT"),
        ]
        for headers, params, status, code in cases:
            response = await source.http.get("/export", params=params, headers=headers)
            assert response.status_code == status, (headers, params, response.text)
            assert response.json()["errors"][0]["extensions"]["code"] == code
    finally:
        await writer.http.aclose()


async def test_a_read_only_key_exports_and_a_write_only_key_cannot(runtime: Runtime, subject: str) -> None:
    writer = await keyed(runtime, ("write",))
    try:
        await record(writer, subject, ["hello"])
        with pytest.raises(Forbidden):
            await anext(export_lines(runtime.reads, Caller(writer.project_id, frozenset()), subject))
        reader = await keyed(runtime, ("read",), writer.project_id)
        try:
            records = await export_over_http(reader, subject)
        finally:
            await reader.http.aclose()
    finally:
        await writer.http.aclose()
    assert records[-1]["events"] == 1


def lines_of(records: list[dict[str, Any]]) -> list[bytes]:
    return [orjson.dumps(r) for r in records]


async def import_error(rt: Runtime, project_id: str, records: list[dict[str, Any]], **kw: Any) -> str:
    with pytest.raises(InvalidInput) as caught:
        await import_lines(rt, Caller.operator(project_id), lines_of(records), **kw)
    return caught.value.message


async def test_an_import_is_all_or_nothing_and_names_the_line_that_breaks_a_rule(
    source: ProjectClient, runtime: Runtime, subject: str
) -> None:
    await remember(source, subject)
    exported = await export_over_http(source, subject)
    target = f"project-{uuid.uuid4().hex[:12]}"

    cut = exported[:-3]  # a stream cut short: no last line
    assert "cut short" in await import_error(runtime, target, cut)
    miscounted = [*exported[:-1], {**exported[-1], "facts": 7}]
    assert "the last line counts" in await import_error(runtime, target, miscounted)
    bad_kind = [dict(r) for r in exported]
    bad_kind[3]["kind"] = "k" * 129
    assert (await import_error(runtime, target, bad_kind)).startswith("line 4: kind must be 1..128 characters")
    bad_source = [dict(r) for r in exported]
    first_fact = next(i for i, r in enumerate(bad_source) if r.get("type") == "fact" and r["sourceEventIds"] == [])
    bad_source[first_fact]["sourceEventIds"] = [str(uuid.uuid4())]
    assert "not an event of the file" in await import_error(runtime, target, bad_source)
    out_of_order = [exported[0], exported[6], exported[1], *exported[7:]]
    assert "after the facts" in await import_error(runtime, target, out_of_order)
    assert "not a haki-context subject export" in await import_error(runtime, target, exported[1:])

    export_of_target = [r async for r in export_lines(runtime.reads, Caller.operator(target), subject)]
    assert orjson.loads(export_of_target[-1]) == {"type": "end", "events": 0, "facts": 0, "conflicts": 0}


async def test_an_import_into_a_subject_that_holds_memory_is_refused(
    source: ProjectClient, runtime: Runtime, subject: str
) -> None:
    await remember(source, subject)
    exported = await export_over_http(source, subject)
    message = await import_error(runtime, source.project_id, exported)
    assert "already holds memory" in message


def cli(pg_uri: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HAKI_")}
    env.update({"HAKI_DATABASE_URL": pg_uri, "HAKI_EMBED_PROVIDER": "hashing"})
    return subprocess.run([CLI, *args], env=env, capture_output=True, text=True, timeout=120, check=False)


async def test_the_command_line_exports_imports_and_forgets(
    source: ProjectClient, runtime: Runtime, migrated: str, subject: str, tmp_path: Path
) -> None:
    await remember(source, subject)
    out = tmp_path / "ann.jsonl"
    exported = cli(migrated, "export", "--project", source.project_id, "--subject", subject, "--out", str(out))
    assert exported.returncode == 0, exported.stderr
    assert [orjson.loads(x) for x in out.read_bytes().splitlines()][1:] == (await export_over_http(source, subject))[1:]

    target = f"project-{uuid.uuid4().hex[:12]}"
    loaded = cli(migrated, "import", "--project", target, "--subject", "ann", str(out))
    assert loaded.returncode == 0, loaded.stderr
    assert "imported 5 event(s), 8 fact(s) and 1 conflict set(s) into subject 'ann'" in loaded.stdout
    again = cli(migrated, "import", "--project", target, "--subject", "ann", str(out))
    assert again.returncode == 1 and again.stderr.startswith("haki-context: error: subject 'ann' already holds")
    assert len(again.stderr.splitlines()) == 1

    forgot = cli(migrated, "forget", "--project", target, "--subject", "ann")
    assert forgot.returncode == 0, forgot.stderr
    assert "5 event(s)" in forgot.stdout and "8 fact(s)" in forgot.stdout
    stdout = cli(migrated, "export", "--project", target, "--subject", "ann")
    assert [orjson.loads(x) for x in stdout.stdout.splitlines()][-1] == {
        "type": "end",
        "events": 0,
        "facts": 0,
        "conflicts": 0,
    }
    async with runtime.pool.acquire() as conn:
        row = await conn.fetchrow("SELECT key_id, actor FROM erasures WHERE project_id = $1", target)
    assert row["key_id"] is None and row["actor"] == "operator"


async def test_exports_past_the_limit_are_refused_and_a_finished_export_frees_its_slot(
    source: ProjectClient, subject: str
) -> None:
    from haki_context import export_http

    await record(source, subject, ["hello"])
    app = source.http._transport.app  # type: ignore[attr-defined]
    await export_over_http(source, subject)
    slots = app.state.export_slots
    assert slots.running == 0
    slots.running = export_http.MAX_CONCURRENT_EXPORTS  # as if that many were streaming
    try:
        response = await source.http.get(
            "/export", params={"subjectId": subject}, headers={"authorization": f"Bearer {source.key}"}
        )
    finally:
        slots.running = 0
    assert response.status_code == 503 and response.headers["retry-after"] == "1"
    assert response.json()["errors"][0]["extensions"]["code"] == "UNAVAILABLE"
    assert (await export_over_http(source, subject))[-1]["events"] == 1


async def test_an_export_dropped_after_its_first_line_gives_back_its_slot_and_connection(
    runtime: Runtime, subject: str
) -> None:
    import asyncio
    import gc

    from haki_context import export_http

    slots = export_http._ExportSlots()
    lines = export_lines(runtime.reads, Caller.operator(f"project-{uuid.uuid4().hex[:12]}"), subject)
    stream = export_http._stream(lines, slots)
    assert orjson.loads(await anext(stream))["format"] == "haki-context/subject"
    assert slots.running == 1
    in_use = runtime.pool.get_size() - runtime.pool.get_idle_size()
    del stream, lines
    gc.collect()
    async with asyncio.timeout(10):  # asyncio closes a collected generator in a task of its own
        while slots.running:
            await asyncio.sleep(0.01)
    assert runtime.pool.get_size() - runtime.pool.get_idle_size() == in_use - 1


async def test_an_export_to_a_reader_that_stops_early_ends_at_once_with_status_0(
    source: ProjectClient, migrated: str, subject: str
) -> None:
    # Far more than a pipe's buffer (64 KiB) and standard output's together: the export is still
    # writing when its reader goes, as with `haki-context export ... | head -1`.
    for batch in range(3):
        await record(source, subject, [f"turn {batch}-{i}: " + "words of a long turn " * 50 for i in range(150)])
    env = {k: v for k, v in os.environ.items() if not k.startswith("HAKI_")}
    env.update({"HAKI_DATABASE_URL": migrated, "HAKI_EMBED_PROVIDER": "hashing"})
    export = subprocess.Popen(
        [CLI, "export", "--project", source.project_id, "--subject", subject],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert export.stdout is not None and export.stderr is not None
        assert orjson.loads(export.stdout.readline())["format"] == "haki-context/subject"
        export.stdout.close()
        try:
            code: int | None = export.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None  # still closing its pool, which waits for the connection the export holds
    finally:
        if export.poll() is None:
            export.kill()
            export.wait()
    stderr = export.stderr.read().decode()
    assert code == 0, (code, stderr)
    # No traceback, and nothing from the pool's close (a connection left in its transaction).
    assert stderr == "", stderr
