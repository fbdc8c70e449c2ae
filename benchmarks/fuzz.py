"""The long fuzz run of the GraphQL API: `python -m benchmarks.fuzz --operations 20000 [--seconds S]`.

Operations are generated from the committed schema.graphql by hypothesis-graphql (queries and
mutations with generated arguments and selections), aimed half the time at a subject and ids
that exist, and sent through the HTTP endpoint of the app in process (ASGI transport, the
hashing embedder, a fresh embedded PostgreSQL). A response fails on an HTTP 5xx other than a
503 UNAVAILABLE, an INTERNAL error, an error without a code, a body that is not JSON, or a leak
(a traceback, SQL text, a filesystem path). It prints the operations run, the failures by kind
and the first failing examples; exit status 1 when any failed. tests/test_fuzz.py runs the
same generation and judgement on a few hundred derandomized examples.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import UTC
from pathlib import Path
from typing import Any

import graphql
import httpx
import hypothesis_graphql as hg
from hypothesis import strategies as st
from hypothesis_graphql import nodes

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "schema.graphql"

# What a response must never show: a traceback, SQL text, driver internals, a filesystem path.
LEAK_MARKERS = (
    "Traceback",
    'File "',
    "SELECT ",
    "INSERT ",
    "UPDATE ",
    "DELETE FROM",
    "asyncpg",
    "psycopg",
    "SQLSTATE",
    "/work/",
    "site-packages",
    "haki_context/",
)

# Arguments that name a subject or a record: generated values are swapped, now and then, for
# ones that exist, so that the fuzz reaches the code behind a lookup, not only its refusal.
SUBJECT_ARGS = {"subjectId"}
ID_ARGS = {"id", "keepFactId", "factIds", "sourceEventIds", "supersedes"}

_DATES = st.one_of(
    st.datetimes().map(lambda d: d.isoformat() + "Z"),
    st.datetimes(timezones=st.just(UTC)).map(lambda d: d.isoformat()),
    st.sampled_from(
        [
            "2026-01-01T00:00:00Z",
            "2026-01-01T00:00:00+05:30",
            "0001-01-01T00:00:00Z",
            "9999-12-31T23:59:59Z",
            "2026-01-01",
            "yesterday",
            "",
            "10000-01-01T00:00:00Z",
        ]
    ),
    st.text(max_size=30),
).map(nodes.String)


def _json_value(depth: int = 3) -> st.SearchStrategy[graphql.ValueNode]:
    leaves: st.SearchStrategy[graphql.ValueNode] = st.one_of(
        st.text(max_size=40).map(nodes.String),
        st.integers(min_value=-(2**70), max_value=2**70).map(nodes.Int),
        st.floats(allow_nan=False, allow_infinity=False).map(nodes.Float),
        st.booleans().map(nodes.Boolean),
        st.just(graphql.NullValueNode()),
    )
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4).map(nodes.List),
            st.dictionaries(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True), inner, max_size=4).map(
                lambda d: nodes.Object(
                    [graphql.ObjectFieldNode(name=graphql.NameNode(value=k), value=v) for k, v in d.items()]
                )
            ),
        ),
        max_leaves=8,
    )


CUSTOM_SCALARS: dict[str, st.SearchStrategy[graphql.ValueNode]] = {"DateTime": _DATES, "JSON": _json_value()}


def schema_text() -> str:
    return SCHEMA_PATH.read_text()


def operations(kind: str = "any") -> st.SearchStrategy[graphql.DocumentNode]:
    """Queries, mutations or both (`kind`) of the committed schema, with generated arguments and selections."""
    schema = schema_text()

    def keep(doc: object) -> object:
        return doc

    common: dict[str, Any] = {"custom_scalars": CUSTOM_SCALARS, "print_ast": keep}
    queries: st.SearchStrategy[Any] = hg.queries(schema, **common)
    mutations: st.SearchStrategy[Any] = hg.mutations(schema, **common)
    if kind == "query":
        return queries
    if kind == "mutation":
        return mutations
    return st.one_of(queries, mutations)


def aim(doc: graphql.DocumentNode, subject: str, ids: list[str], rng: random.Random) -> str:
    """The document as text, its subject and id arguments swapped for real ones with probability 1/2."""
    use_subject = rng.random() < 0.5
    use_ids = bool(ids) and rng.random() < 0.5
    if not (use_subject or use_ids):
        return graphql.print_ast(doc)

    def real(name: str, value: graphql.ValueNode) -> graphql.ValueNode | None:
        if use_subject and name in SUBJECT_ARGS and isinstance(value, graphql.StringValueNode):
            return nodes.String(subject)
        if use_ids and name in ID_ARGS:
            if isinstance(value, graphql.StringValueNode):
                return nodes.String(rng.choice(ids))
            if isinstance(value, graphql.ListValueNode):
                return nodes.List([nodes.String(rng.choice(ids)) for _ in value.values])
        return None

    class Swap(graphql.Visitor):
        def enter_argument(self, node: graphql.ArgumentNode, *_: Any) -> graphql.ArgumentNode | None:
            new = real(node.name.value, node.value)
            return None if new is None else graphql.ArgumentNode(name=node.name, value=new)

        def enter_object_field(self, node: graphql.ObjectFieldNode, *_: Any) -> graphql.ObjectFieldNode | None:
            new = real(node.name.value, node.value)
            return None if new is None else graphql.ObjectFieldNode(name=node.name, value=new)

    return graphql.print_ast(graphql.visit(doc, Swap()))


def judge(request_text: str, status: int, raw: bytes) -> list[tuple[str, str]]:
    """The failures of one response, as (kind, detail): none when it is a well-behaved answer."""
    failures: list[tuple[str, str]] = []
    text = raw.decode("utf-8", errors="replace")
    try:
        body: Any = json.loads(text)
    except ValueError:
        body = None
    codes = [
        str((e.get("extensions") or {}).get("code"))
        for e in (body.get("errors") or [] if isinstance(body, dict) else [])
        if isinstance(e, dict)
    ]
    if status >= 500 and not (status == 503 and codes and all(c == "UNAVAILABLE" for c in codes)):
        failures.append((f"http-{status}", text[:300]))
    if "INTERNAL" in codes:
        failures.append(("INTERNAL", text[:300]))
    if body is None:
        failures.append(("not-json", text[:300]))
    elif isinstance(body, dict) and body.get("errors"):
        for e in body["errors"]:
            if not isinstance(e, dict) or "code" not in (e.get("extensions") or {}):
                failures.append(("error-without-code", json.dumps(e)[:300]))
    for marker in LEAK_MARKERS:
        # A marker the request itself carried may come back as data: that is an echo, not a leak.
        if marker in text and marker not in request_text:
            failures.append((f"leak:{marker.strip()}", text[:300]))
    return failures


Judge = Callable[[str, int, bytes], list[tuple[str, str]]]


# ---------------------------------------------------------------- the long run


class Tally:
    """Operations sent, failures by kind, the first few failing examples, error codes seen."""

    def __init__(self, keep: int = 5) -> None:
        self.operations = 0
        self.failures: Counter[str] = Counter()
        self.examples: list[tuple[str, str, str]] = []
        self.codes: Counter[str] = Counter()
        self.keep = keep

    def add(self, request_text: str, status: int, raw: bytes) -> None:
        self.operations += 1
        try:
            body = json.loads(raw)
            for e in body.get("errors") or []:
                self.codes[str((e.get("extensions") or {}).get("code"))] += 1
            if not body.get("errors"):
                self.codes["ok"] += 1
        except (ValueError, AttributeError):
            self.codes["not-json"] += 1
        for kind, detail in judge(request_text, status, raw):
            self.failures[kind] += 1
            if len(self.examples) < self.keep:
                self.examples.append((kind, request_text, f"{status} {detail}"))


async def _open_target(data_dir: Path) -> tuple[Any, Any, Any, httpx.AsyncClient, str, list[str]]:
    from haki_context.app import create_app
    from haki_context.core.embedding.embedder import Embedder, HashingEncoder
    from haki_context.core.serving.runtime import Runtime, open_pool
    from haki_context.db import embedded, migrate
    from haki_context.settings import EmbedProvider, Settings

    server = embedded.start(data_dir)
    await migrate.apply(server.uri)
    settings = Settings(database_url=server.uri, embed_provider=EmbedProvider.HASHING, dev_mode=True)
    embedder = Embedder(HashingEncoder())
    pool = await open_pool(server.uri, settings, min_size=1, max_size=8)
    rt = Runtime(pool=pool, embedder=embedder, settings=settings)
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(settings, runtime=rt)), base_url="http://t")
    subject = f"fuzz-{uuid.uuid4().hex[:12]}"
    record = "mutation($i: [EventInput!]!) { recordEvents(inputs: $i) { id } }"
    events = [{"subjectId": subject, "kind": "note", "payload": {"text": t}} for t in ("Ann lives in Lisbon.", "tea")]
    r = await http.post("/graphql", json={"query": record, "variables": {"i": events}})
    ids = [e["id"] for e in r.json()["data"]["recordEvents"]]
    assert_ = "mutation($i: FactInput!) { assertFact(input: $i) { fact { id } } }"
    for p, v in (("city", "Lisbon"), ("drink", "tea")):
        fact = {"subjectId": subject, "predicate": p, "value": v, "mode": "ADD"}
        r = await http.post("/graphql", json={"query": assert_, "variables": {"i": fact}})
        ids.append(r.json()["data"]["assertFact"]["fact"]["id"])
    return server, pool, embedder, http, subject, [*ids, str(uuid.uuid4())]


def run(operations_wanted: int, seconds: float, batch: int = 500) -> Tally:
    """Send up to `operations_wanted` generated operations (at most `seconds`) to the in-process app."""
    from hypothesis import HealthCheck, given, seed, settings

    tally = Tally()
    loop = asyncio.new_event_loop()
    data_dir = Path(tempfile.mkdtemp(prefix="haki-fuzz-"))
    server, pool, embedder, http, subject, ids = loop.run_until_complete(_open_target(data_dir))
    rng = random.Random(0)
    strategy = operations()
    deadline = time.monotonic() + seconds
    try:
        index = 0
        while tally.operations < operations_wanted and time.monotonic() < deadline:
            size = min(batch, operations_wanted - tally.operations)

            @seed(index)
            @settings(
                max_examples=size,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            @given(doc=strategy)
            def one(doc: graphql.DocumentNode) -> None:
                if time.monotonic() > deadline or tally.operations >= operations_wanted:
                    return
                text = aim(doc, subject, ids, rng)
                response = loop.run_until_complete(http.post("/graphql", json={"query": text}))
                tally.add(text, response.status_code, response.content)

            one()
            index += 1
            print(f"  {tally.operations} operations, {sum(tally.failures.values())} failures", flush=True)
    finally:
        loop.run_until_complete(http.aclose())
        loop.run_until_complete(pool.close())
        embedder.close()
        server.close()
        loop.close()
        shutil.rmtree(data_dir, ignore_errors=True)
    return tally


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--operations", type=int, default=20000, help="operations to send (default 20000)")
    parser.add_argument("--seconds", type=float, default=3600.0, help="stop after this long (default 3600)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    tally = run(args.operations, args.seconds)
    elapsed = time.monotonic() - started
    print(f"operations run: {tally.operations} in {elapsed:.0f} s")
    print(f"failures: {sum(tally.failures.values())}")
    for kind, n in tally.failures.most_common():
        print(f"  {kind}: {n}")
    print("responses by error code: " + ", ".join(f"{c} {n}" for c, n in tally.codes.most_common()))
    for kind, text, detail in tally.examples:
        print(f"--- {kind}\n{text}\n-> {detail}")
    return 1 if tally.failures else 0


if __name__ == "__main__":
    sys.exit(main())
