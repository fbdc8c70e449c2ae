"""HakiStore, the Python client's LangGraph store, against a live server.

LangGraph ships no conformance suite for stores, so every operation of `BaseStore` is tested
here, blocking and async: the behaviours LangGraph's stores share are run against both
InMemoryStore (the reference) and HakiStore; what is HakiStore's own (facts on the server, the
`context` call behind a search, the namespaces it can list) against HakiStore with the server's
own view beside it. A server is started with `haki-context serve` on a fresh database of the test
PostgreSQL (development mode, the hashing embedder), and the graphs compiled here have no model.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, TypedDict

import pytest

pytest.importorskip(
    "langgraph.graph",
    reason="LangGraph is not installed: it comes with the `langgraph` extra of haki-context-client "
    "(and with the root's `test` extra)",
)

from browser_support import serve
from graphql import build_schema, parse, validate
from haki_context_client import HakiClientSync
from haki_context_client.langgraph import (
    SEARCH_DOCUMENT,
    HakiItem,
    HakiSearchItem,
    HakiStore,
    namespace_to_subject,
    subject_to_namespace,
)
from haki_context_client.types import AssertOutcome, Decision, FactStatus, ItemKind
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore

ROOT = Path(__file__).resolve().parent.parent
AGENTS_DOC = ROOT / "docs" / "agents.md"
ADDRESS = "http://127.0.0.1:8000"


@pytest.fixture(scope="module")
def server(migrated: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL of a `haki-context serve` on a database of its own."""
    with serve(migrated, tmp_path_factory) as served:
        yield served.base


@pytest.fixture
def store(server: str) -> Iterator[HakiStore]:
    with HakiStore(server) as made:
        yield made


@pytest.fixture
async def astore(server: str) -> AsyncIterator[HakiStore]:
    async with HakiStore(server) as made:
        yield made


@pytest.fixture
def haki(server: str) -> Iterator[HakiClientSync]:
    """The server seen through the plain client."""
    with HakiClientSync(server) as client:
        yield client


@pytest.fixture(params=["in-memory", "haki"])
def any_store(request: pytest.FixtureRequest, server: str) -> Iterator[BaseStore]:
    """LangGraph's InMemoryStore, then HakiStore: what both must do alike."""
    if request.param == "in-memory":
        yield InMemoryStore()
    else:
        with HakiStore(server) as made:
            yield made


@pytest.fixture
def ns() -> tuple[str, ...]:
    """A namespace no other test writes in (the server's database is the module's)."""
    return ("memories", f"user-{uuid.uuid4().hex[:12]}")


def active_facts(haki: HakiClientSync, namespace: tuple[str, ...]) -> dict[str, Any]:
    page = haki.facts(namespace_to_subject(namespace), status=FactStatus.ACTIVE, first=100)
    return {edge.node.predicate: edge.node for edge in page.edges}


# ------------------------------------------------------------------ namespaces and subjects


def test_a_namespace_is_a_subject_and_back() -> None:
    for namespace in [("u1",), ("memories", "user-42"), ("a", "b", "c d", "é")]:
        subject = namespace_to_subject(namespace)
        assert subject == ".".join(namespace)
        assert subject_to_namespace(subject) == namespace
    for bad in [(), ("a.b",), ("",), ("a", "b\x00")]:
        with pytest.raises(InvalidNamespaceError):
            namespace_to_subject(bad)
    with pytest.raises(InvalidNamespaceError):
        subject_to_namespace("a..b")


def test_the_search_document_validates_against_the_schema() -> None:
    schema = build_schema((ROOT / "schema.graphql").read_text(encoding="utf-8"))
    assert validate(schema, parse(SEARCH_DOCUMENT)) == []


# ------------------------------------------------------------- what every store does alike


def test_put_get_replace_and_delete(any_store: BaseStore, ns: tuple[str, ...]) -> None:
    assert any_store.get(ns, "food") is None
    any_store.put(ns, "food", {"likes": "sardines", "n": 1})
    item = any_store.get(ns, "food")
    assert item is not None
    assert (item.namespace, item.key, item.value) == (ns, "food", {"likes": "sardines", "n": 1})
    assert isinstance(item.created_at, datetime) and item.created_at.tzinfo is not None
    assert item.updated_at >= item.created_at

    any_store.put(ns, "food", {"likes": "octopus", "n": 2})
    replaced = any_store.get(ns, "food")
    assert replaced is not None and replaced.value == {"likes": "octopus", "n": 2}

    any_store.delete(ns, "food")
    assert any_store.get(ns, "food") is None
    any_store.delete(ns, "food")  # deleting what is not there is no error
    assert any_store.get(ns, "never-put") is None


def test_a_batch_answers_in_order_and_reads_before_its_writes(any_store: BaseStore, ns: tuple[str, ...]) -> None:
    any_store.put(ns, "kept", {"v": 0})
    results = any_store.batch(
        [
            PutOp(ns, "new", {"v": 1}),
            GetOp(ns, "new"),
            GetOp(ns, "kept"),
            PutOp(ns, "new", {"v": 2}),
            SearchOp(ns, limit=10),
            ListNamespacesOp(match_conditions=(MatchCondition("prefix", ns),)),
            PutOp(ns, "kept", None),
        ]
    )
    assert len(results) == 7
    assert results[0] is None and results[3] is None and results[6] is None
    assert results[1] is None  # the batch's own put runs after its reads
    kept = results[2]
    assert isinstance(kept, Item) and kept.value == {"v": 0}
    searched = results[4]
    assert isinstance(searched, list) and [i.key for i in searched if isinstance(i, Item)] == ["kept"]
    assert results[5] == [ns]
    new = any_store.get(ns, "new")
    assert new is not None and new.value == {"v": 2}  # the last write of a key wins
    assert any_store.get(ns, "kept") is None


def test_search_filters_pages_and_orders_without_a_query(any_store: BaseStore, ns: tuple[str, ...]) -> None:
    rows: dict[str, dict[str, Any]] = {
        "a": {"kind": "fruit", "n": 1, "tags": ["red"], "meta": {"lang": "en", "x": 1}},
        "b": {"kind": "fruit", "n": 5, "tags": ["green"], "meta": {"lang": "fr", "x": 1}},
        "c": {"kind": "fish", "n": 10, "meta": {"lang": "en", "x": 2}},
        "d": {"kind": "fish", "n": 0},
    }
    for key, value in rows.items():
        any_store.put(ns, key, value)

    def keys(**kwargs: Any) -> set[str]:
        return {item.key for item in any_store.search(ns, **kwargs)}

    assert keys() == set(rows)
    assert keys(filter={"kind": "fruit"}) == {"a", "b"}
    assert keys(filter={"meta": {"lang": "en"}}) == {"a", "c"}
    assert keys(filter={"tags": ["red"]}) == {"a"}
    assert keys(filter={"n": {"$gt": 1}}) == {"b", "c"}
    assert keys(filter={"n": {"$gte": 5, "$lt": 10}}) == {"b"}
    assert keys(filter={"n": {"$lte": 1}}) == {"a", "d"}
    assert keys(filter={"kind": {"$ne": "fish"}}) == {"a", "b"}
    assert keys(filter={"kind": {"$eq": "fish"}, "meta": {"x": 2}}) == {"c"}
    everything = [item.key for item in any_store.search(ns, limit=10)]
    assert [item.key for item in any_store.search(ns, limit=2)] == everything[:2]
    assert [item.key for item in any_store.search(ns, limit=2, offset=3)] == everything[3:]
    assert all(item.score is None for item in any_store.search(ns))


def test_list_namespaces_prefix_suffix_wildcards_depth_and_pages(any_store: BaseStore) -> None:
    root = f"t-{uuid.uuid4().hex[:8]}"
    written = [(root, "a", "x"), (root, "a", "y", "z"), (root, "b", "x"), (root, "b"), (root, "c", "y", "z")]
    for namespace in written:
        any_store.put(namespace, "k", {"v": 1})
    mine = sorted(written)
    assert any_store.list_namespaces(prefix=(root,)) == mine
    assert any_store.list_namespaces(prefix=(root, "a")) == [(root, "a", "x"), (root, "a", "y", "z")]
    assert any_store.list_namespaces(prefix=(root, "*", "x")) == [(root, "a", "x"), (root, "b", "x")]
    assert any_store.list_namespaces(prefix=(root,), suffix=("y", "z")) == [
        (root, "a", "y", "z"),
        (root, "c", "y", "z"),
    ]
    assert any_store.list_namespaces(prefix=(root,), suffix=("*", "x")) == [(root, "a", "x"), (root, "b", "x")]
    assert any_store.list_namespaces(prefix=(root,), max_depth=2) == [(root, "a"), (root, "b"), (root, "c")]
    assert any_store.list_namespaces(prefix=(root,), limit=2, offset=1) == mine[1:3]


def test_namespaces_labels_and_ttl_are_checked(any_store: BaseStore) -> None:
    for bad in [("a.b",), ("",), ()]:
        with pytest.raises(InvalidNamespaceError):
            any_store.put(bad, "k", {"v": 1})
    with pytest.raises(InvalidNamespaceError):
        any_store.put(("langgraph", "x"), "k", {"v": 1})
    with pytest.raises(NotImplementedError):
        any_store.put(("ok",), "k", {"v": 1}, ttl=5)


# ------------------------------------------------------------------------- HakiStore's own


def test_an_item_is_a_fact_of_the_namespaces_subject(
    store: HakiStore, haki: HakiClientSync, ns: tuple[str, ...]
) -> None:
    store.put(ns, "invoice_language", {"text": "Invoices in French"})
    facts = active_facts(haki, ns)
    first = facts["invoice_language"]
    assert first.subject_id == ".".join(ns) and first.value == {"text": "Invoices in French"}
    item = store.get(ns, "invoice_language")
    assert isinstance(item, HakiItem) and item.fact_id == first.id
    assert item.created_at == first.recorded_at and item.dict()["fact_id"] == first.id

    # The same value again reinforces the fact: no new version, updated_at moves.
    store.put(ns, "invoice_language", {"text": "Invoices in French"})
    again = store.get(ns, "invoice_language")
    assert isinstance(again, HakiItem) and again.fact_id == first.id and again.updated_at > again.created_at
    assert haki.assert_fact(".".join(ns), "invoice_language", {"text": "Invoices in French"}).outcome is (
        AssertOutcome.REINFORCED
    )

    # Another value supersedes it: the old one stays in the history.
    store.put(ns, "invoice_language", {"text": "Invoices in German"})
    second = active_facts(haki, ns)["invoice_language"]
    assert second.id != first.id and second.value == {"text": "Invoices in German"}
    old = haki.fact(first.id)
    assert old is not None and old.status is FactStatus.SUPERSEDED
    assert old.superseded_by is not None and old.superseded_by.id == second.id

    # A delete retracts it: readable for audit, never served again.
    store.delete(ns, "invoice_language")
    assert "invoice_language" not in active_facts(haki, ns)
    retracted = haki.fact(second.id)
    assert retracted is not None and retracted.status is FactStatus.RETRACTED


def test_a_search_with_a_query_is_a_context_call_with_its_trace(
    store: HakiStore, haki: HakiClientSync, ns: tuple[str, ...]
) -> None:
    store.put(ns, "invoice_language", {"text": "Invoices are sent in French", "topic": "billing"})
    store.put(ns, "favourite_food", {"text": "Grilled sardines on Fridays", "topic": "food"})
    store.put(ns, "home_town", {"text": "Lives in Lisbon near the river", "topic": "home"})
    query = "Which language are invoices sent in?"
    found = store.search(ns, query=query, limit=10)
    assert found and all(isinstance(item, HakiSearchItem) for item in found)
    assert found[0].key == "invoice_language"
    assert all(isinstance(item.score, float) for item in found)
    scores = [item.score or 0.0 for item in found]
    assert scores == sorted(scores, reverse=True)

    traced = {item.trace_id for item in found if isinstance(item, HakiSearchItem)}
    assert len(traced) == 1 and None not in traced
    (trace_id,) = traced
    assert trace_id is not None
    trace = haki.trace(trace_id, item_kind=ItemKind.FACT)
    assert trace is not None and trace.subject_id == namespace_to_subject(ns) and trace.query == query
    included = [d.item_id for d in trace.decisions if d.decision is Decision.INCLUDED]
    assert included == [item.fact_id for item in found if isinstance(item, HakiSearchItem)]
    assert found[0].dict()["trace_id"] == trace_id

    assert [i.key for i in store.search(ns, query=query, filter={"topic": "food"})] == ["favourite_food"]
    assert [i.key for i in store.search(ns, query=query, limit=1, offset=1)] == [found[1].key]
    # A budget too small for any fact: the packet serves none, so the search finds none.
    with HakiStore(store.base_url, search_budget=1) as tight:
        assert tight.search(ns, query=query) == []


def test_a_search_without_a_query_lists_newest_first(store: HakiStore, ns: tuple[str, ...]) -> None:
    for key in ["first", "second", "third"]:
        store.put(ns, key, {"text": key})
    found = store.search(ns)
    assert [i.key for i in found] == ["third", "second", "first"]
    assert all(isinstance(i, HakiSearchItem) and i.trace_id is None and i.score is None for i in found)
    # An order asked of a field an item lacks, or holds as another type, leaves the item out
    # (InMemoryStore raises TypeError there).
    store.put(ns, "counted", {"text": "counted", "n": 3})
    store.put(ns, "worded", {"text": "worded", "n": "three"})
    assert [i.key for i in store.search(ns, filter={"n": {"$gt": 1}})] == ["counted"]


def test_reads_go_past_the_first_page_of_facts(store: HakiStore, haki: HakiClientSync, ns: tuple[str, ...]) -> None:
    subject = namespace_to_subject(ns)
    haki.assert_facts([{"subjectId": subject, "predicate": f"k{i:03d}", "value": {"i": i}} for i in range(105)])
    oldest = store.get(ns, "k000")
    assert oldest is not None and oldest.value == {"i": 0}
    assert [i.key for i in store.search(ns, limit=3, offset=102)] == ["k002", "k001", "k000"]
    assert [i.key for i in store.search(ns, filter={"i": {"$lt": 2}})] == ["k001", "k000"]
    store.delete(ns, "k000")
    assert store.get(ns, "k000") is None


def test_a_value_that_is_no_object_reads_as_one(store: HakiStore, haki: HakiClientSync, ns: tuple[str, ...]) -> None:
    haki.assert_fact(namespace_to_subject(ns), "language", "French")
    item = store.get(ns, "language")
    assert item is not None and item.value == {"value": "French"}


def test_a_search_covers_the_known_namespaces_under_its_prefix(store: HakiStore, ns: tuple[str, ...]) -> None:
    store.put(ns, "top", {"text": "invoices in French"})
    store.put((*ns, "billing"), "deep", {"text": "invoices every month"})
    store.put((*ns, "home"), "other", {"text": "lives in Lisbon"})
    assert {(i.namespace, i.key) for i in store.search(ns)} == {
        (ns, "top"),
        ((*ns, "billing"), "deep"),
        ((*ns, "home"), "other"),
    }
    assert [i.key for i in store.search((*ns, "billing"))] == ["deep"]
    queried = store.search(ns[:1], query="invoices", limit=10)
    assert {i.key for i in queried} >= {"top", "deep"}
    scores = [i.score or 0.0 for i in queried]
    assert scores == sorted(scores, reverse=True)  # several packets merged by score


def test_list_namespaces_knows_what_this_store_wrote_or_read(
    server: str, store: HakiStore, ns: tuple[str, ...]
) -> None:
    store.put(ns, "k", {"v": 1})
    assert store.list_namespaces(prefix=ns[:1], suffix=ns[1:]) == [ns]
    with HakiStore(server) as other:
        # The server has no query that lists subjects: another store (another process) starts empty.
        assert other.list_namespaces(prefix=ns) == []
        assert other.get(ns, "k") is not None
        assert other.list_namespaces(prefix=ns) == [ns]
    elsewhere = (*ns, "elsewhere")
    with HakiStore(server, namespaces=[elsewhere]) as given:
        assert given.list_namespaces(prefix=ns) == [elsewhere]
    with pytest.raises(InvalidNamespaceError):
        HakiStore(server, namespaces=[("a.b",)])


def test_a_batch_is_checked_whole_before_it_runs(store: HakiStore, ns: tuple[str, ...]) -> None:
    with pytest.raises(InvalidNamespaceError):
        store.batch([PutOp(ns, "k", {"v": 1}), GetOp(("a.b",), "k")])
    with pytest.raises(NotImplementedError):
        store.batch([PutOp(ns, "k", {"v": 1}), PutOp(ns, "j", {"v": 1}, ttl=1.0)])
    with pytest.raises(ValueError, match="operator"):
        store.search(ns, filter={"n": {"$in": [1]}})
    assert store.get(ns, "k") is None


def test_the_servers_limits_are_checked_before_a_batch_writes_anything(store: HakiStore, ns: tuple[str, ...]) -> None:
    with pytest.raises(InvalidNamespaceError, match="128"):  # a subject id is 1..128 characters
        store.batch([PutOp(ns, "first", {"v": 1}), PutOp(("x" * 129,), "k", {"v": 1})])
    with pytest.raises(ValueError, match="128"):  # and so is a predicate
        store.batch([PutOp(ns, "first", {"v": 1}), PutOp(ns, "k" * 129, {"v": 1})])
    with pytest.raises(ValueError, match="blank"):
        store.put(ns, "  ", {"v": 1})
    assert store.get(ns, "first") is None


def test_a_search_query_longer_than_the_servers_is_cut_to_it(store: HakiStore, ns: tuple[str, ...]) -> None:
    store.put(ns, "lang", {"text": "invoices are written in German"})
    found = store.search(ns, query="Which language for invoices? " + "x" * 5000)
    assert [item.key for item in found] == ["lang"]


def test_one_store_serves_one_asyncio_run_after_another(server: str, ns: tuple[str, ...]) -> None:
    store = HakiStore(server)
    try:
        asyncio.run(store.aput(ns, "k", {"v": 1}))
        item = asyncio.run(store.aget(ns, "k"))  # a new loop: the first one's client is gone with it
        assert item is not None and item.value == {"v": 1}
    finally:
        store.close()
        asyncio.run(store.aclose())


# -------------------------------------------------------------------------------- async


async def test_every_async_operation(astore: HakiStore, ns: tuple[str, ...]) -> None:
    assert await astore.aget(ns, "food") is None
    await astore.aput(ns, "food", {"text": "Grilled sardines", "n": 1})
    await astore.aput(ns, "town", {"text": "Lisbon", "n": 2})
    item = await astore.aget(ns, "food")
    assert isinstance(item, HakiItem) and item.value == {"text": "Grilled sardines", "n": 1}

    listed = await astore.asearch(ns)
    assert [i.key for i in listed] == ["town", "food"]
    assert [i.key for i in await astore.asearch(ns, filter={"n": {"$gt": 1}})] == ["town"]
    found = await astore.asearch(ns, query="sardines", limit=1)
    assert [i.key for i in found] == ["food"]
    assert isinstance(found[0], HakiSearchItem) and found[0].trace_id and found[0].score is not None

    assert await astore.alist_namespaces(prefix=ns) == [ns]
    results = await astore.abatch([GetOp(ns, "town"), PutOp(ns, "town", None), GetOp(ns, "town")])
    assert [r.key if isinstance(r, Item) else r for r in results] == ["town", None, "town"]
    await astore.adelete(ns, "food")
    assert await astore.aget(ns, "food") is None and await astore.aget(ns, "town") is None


async def test_sync_and_async_share_what_they_write(astore: HakiStore, ns: tuple[str, ...]) -> None:
    await astore.aput(ns, "k", {"v": 1})
    assert astore.get(ns, "k") is not None  # the blocking client sees the asyncio client's write
    astore.put(ns, "k", {"v": 2})
    again = await astore.aget(ns, "k")
    assert again is not None and again.value == {"v": 2}


# ------------------------------------------------------------------- in a compiled graph


class State(TypedDict):
    user: str
    message: str
    recalled: list[str]


def remember_and_recall(state: State, runtime: Runtime[None]) -> dict[str, list[str]]:
    assert runtime.store is not None
    namespace = ("memories", state["user"])
    runtime.store.put(namespace, "invoice_language", {"text": "Invoices are sent in French"})
    found = runtime.store.search(namespace, query=state["message"], limit=3)
    return {"recalled": [f"{item.key}={item.value['text']}" for item in found]}


async def aremember_and_recall(state: State, runtime: Runtime[None]) -> dict[str, list[str]]:
    assert runtime.store is not None
    namespace = ("memories", state["user"])
    await runtime.store.aput(namespace, "home_town", {"text": "Lives in Lisbon"})
    found = await runtime.store.asearch(namespace, query=state["message"], limit=3)
    return {"recalled": [f"{item.key}={item.value['text']}" for item in found]}


def test_a_compiled_graph_puts_and_searches_its_memory(store: HakiStore, haki: HakiClientSync) -> None:
    builder = StateGraph(State)
    builder.add_node("remember_and_recall", remember_and_recall)
    builder.add_edge(START, "remember_and_recall")
    builder.add_edge("remember_and_recall", END)
    graph = builder.compile(store=store)
    user = f"user-{uuid.uuid4().hex[:8]}"
    out = graph.invoke({"user": user, "message": "Which language for invoices?", "recalled": []})
    assert out["recalled"] == ["invoice_language=Invoices are sent in French"]
    assert "invoice_language" in active_facts(haki, ("memories", user))


async def test_an_async_graph_uses_abatch(astore: HakiStore, haki: HakiClientSync) -> None:
    builder = StateGraph(State)
    builder.add_node("aremember_and_recall", aremember_and_recall)
    builder.add_edge(START, "aremember_and_recall")
    builder.add_edge("aremember_and_recall", END)
    graph = builder.compile(store=astore)
    user = f"user-{uuid.uuid4().hex[:8]}"
    out = await graph.ainvoke({"user": user, "message": "Where does the user live?", "recalled": []})
    assert out["recalled"] == ["home_town=Lives in Lisbon"]
    assert "home_town" in active_facts(haki, ("memories", user))


# ----------------------------------------------------------------------------- the docs


def docs_example(name: str) -> str:
    """The fenced block after `<!-- example: name -->` in docs/agents.md (one only)."""
    pattern = re.compile(rf"<!-- example: {re.escape(name)} -->\s*\n```python\n(.*?)\n```", re.DOTALL)
    blocks = pattern.findall(AGENTS_DOC.read_text(encoding="utf-8"))
    assert len(blocks) == 1, f"docs/agents.md must mark one python block `example: {name}`"
    return str(blocks[0])


def test_the_docs_snippet_runs_as_pasted(server: str, tmp_path: Path) -> None:
    code = docs_example("langgraph")
    assert code.count(ADDRESS) == 1
    script = tmp_path / "langgraph_memory.py"
    script.write_text(code.replace(ADDRESS, server), encoding="utf-8")
    # The snippet imports the client as its README says to install it; here, from its sources.
    client_src = str(ROOT / "clients" / "python" / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [client_src, os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr + done.stdout
    assert "invoice_language" in done.stdout and "French" in done.stdout, done.stdout
    assert re.search(r"trace [0-9a-f-]{36}", done.stdout), done.stdout
