"""LangGraph long-term memory on haki-context: `HakiStore`, a LangGraph `BaseStore`.

    from haki_context_client.langgraph import HakiStore

    with HakiStore("http://127.0.0.1:8000", api_key="hk_...") as store:
        graph = builder.compile(store=store)  # nodes reach it as `runtime.store`

Needs the `langgraph` extra: `pip install 'haki-context-client[langgraph]'`.

How LangGraph's store maps onto the memory:

| LangGraph | haki-context |
|---|---|
| a namespace `("memories", "user-42")` | the subject `"memories.user-42"` (labels joined with `.`) |
| an item's key | a fact's predicate |
| an item's value (a dict) | the fact's value (a JSON object) |
| `put` | `assertFact` (mode SUPERSEDE: the new value replaces the active one, which stays in the history) |
| `delete` | `retractFact` of the key's active fact (it stays readable for audit, status RETRACTED) |
| `get` | the subject's active facts (`facts(status: ACTIVE)`), read page by page until the key's |
| `search(namespace, query=...)` | `context(subjectId, query, budget)`: the facts the packet serves, in its order, each with the packet's score and the call's trace id |
| `search(namespace)` without a query | the subject's active facts, newest recorded first, score None |
| `list_namespaces` | the namespaces this store has written or read in this process (the server has no query that lists subjects) |

LangGraph forbids `.` in a namespace label, so joining the labels with `.` is reversible:
`subject_to_namespace(namespace_to_subject(ns)) == ns` for every valid namespace.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Any, Generic, Self, TypeVar

try:
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        InvalidNamespaceError,
        Item,
        ListNamespacesOp,
        MatchCondition,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
        validate_op_namespace,
    )
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "haki_context_client.langgraph needs LangGraph's store: pip install 'haki-context-client[langgraph]'"
    ) from exc

from .client import DEFAULT_URL, HakiClient, HakiClientSync
from .types import Fact, FactPage, FactStatus

__all__ = [
    "SEARCH_DOCUMENT",
    "HakiItem",
    "HakiSearchItem",
    "HakiStore",
    "namespace_to_subject",
    "subject_to_namespace",
]

SEPARATOR = "."
"""Joins a namespace's labels into a subject id; LangGraph refuses it inside a label."""
PAGE_SIZE = 100
"""Facts per `facts` request: the server's largest page."""
MAX_ID_CHARS = 128
"""The server's longest subject id and predicate: a namespace's joined labels and a key."""
MAX_QUERY_CHARS = 4000
"""The server's longest `context` query: a longer search query is cut to it."""
DEFAULT_SEARCH_BUDGET = 2000
"""Tokens of the `context` call behind a search with a query (the server's default is 900)."""
RETRACT_REASON = "deleted through LangGraph's BaseStore (HakiStore)"

SEARCH_DOCUMENT = """
query HakiStoreSearch($subjectId: String!, $query: String!, $budget: Int) {
  context(subjectId: $subjectId, query: $query, budget: $budget) {
    traceId
    facts {
      id
      predicate
      value
      score
      fact {
        recordedAt
        lastReinforcedAt
      }
    }
  }
}
"""
"""The `context` call behind `search(namespace, query=...)`: the served facts with their
scores and timestamps, and the call's trace id."""


def namespace_to_subject(namespace: tuple[str, ...]) -> str:
    """The subject id of a namespace: its labels joined with `.` (("memories", "u1") ->
    "memories.u1"). InvalidNamespaceError for an empty namespace or a label LangGraph refuses
    (empty, not a string, holding `.` or NUL)."""
    if not namespace:
        raise InvalidNamespaceError("A namespace of the memory needs at least one label.")
    validate_op_namespace(GetOp(namespace, ""))
    subject_id = SEPARATOR.join(namespace)
    if len(subject_id) > MAX_ID_CHARS:
        raise InvalidNamespaceError(
            f"A namespace's labels joined with {SEPARATOR!r} are its subject id, at most {MAX_ID_CHARS} characters."
        )
    return subject_id


def subject_to_namespace(subject_id: str) -> tuple[str, ...]:
    """The namespace of a subject id, the inverse of `namespace_to_subject`: the parts between
    its `.` ("memories.u1" -> ("memories", "u1")). InvalidNamespaceError when a part is empty
    (such a subject was not written by a HakiStore)."""
    namespace = tuple(subject_id.split(SEPARATOR))
    if any(not label for label in namespace):
        raise InvalidNamespaceError(f"The subject {subject_id!r} is no namespace: it has an empty part.")
    return namespace


class HakiItem(Item):
    """An `Item` read from the memory, with the id of the fact that holds it (`fact_id`)."""

    __slots__ = ("fact_id",)

    def __init__(
        self,
        *,
        value: dict[str, Any],
        key: str,
        namespace: tuple[str, ...],
        created_at: datetime,
        updated_at: datetime,
        fact_id: str,
    ) -> None:
        super().__init__(value=value, key=key, namespace=namespace, created_at=created_at, updated_at=updated_at)
        self.fact_id = fact_id

    def dict(self) -> dict[str, Any]:
        """The item as LangGraph writes it, plus `fact_id`."""
        return {**super().dict(), "fact_id": self.fact_id}


class HakiSearchItem(SearchItem):
    """A `SearchItem` from the memory: `score` is the packet's score (None without a query),
    `trace_id` the id of the `context` call's trace (None without a query: no call was made),
    `fact_id` the fact that holds the item. `haki.trace(item.trace_id)` says why each fact was
    served or left out."""

    __slots__ = ("fact_id", "trace_id")

    def __init__(
        self,
        namespace: tuple[str, ...],
        key: str,
        value: dict[str, Any],
        created_at: datetime,
        updated_at: datetime,
        score: float | None = None,
        *,
        fact_id: str,
        trace_id: str | None = None,
    ) -> None:
        super().__init__(namespace, key, value, created_at, updated_at, score)
        self.fact_id = fact_id
        self.trace_id = trace_id

    def dict(self) -> dict[str, Any]:
        """The item as LangGraph writes it, plus `fact_id` and `trace_id`."""
        return {**super().dict(), "fact_id": self.fact_id, "trace_id": self.trace_id}


# ------------------------------------------------------------------ what a batch asks the server

T = TypeVar("T")


@dataclass(frozen=True)
class _Stored:
    """A fact as the store reads it, from `facts` or from a packet."""

    id: str
    predicate: str
    value: Any
    recorded_at: datetime
    reinforced_at: datetime | None
    score: float | None = None
    trace_id: str | None = None

    @property
    def updated_at(self) -> datetime:
        # An equal value put again reinforces the fact instead of writing a new one.
        return max(self.recorded_at, self.reinforced_at or self.recorded_at)

    @property
    def item_value(self) -> dict[str, Any]:
        # A value that is no JSON object (asserted by another client) reads as {"value": ...}.
        return self.value if isinstance(self.value, dict) else {"value": self.value}


@dataclass(frozen=True)
class _Page:
    facts: list[_Stored]
    end_cursor: str | None
    has_next: bool


class _Request(Generic[T]):
    """One call to the server a batch needs; its answer is a T."""


@dataclass(frozen=True)
class _ActivePage(_Request[_Page]):
    subject_id: str
    after: str | None


@dataclass(frozen=True)
class _Search(_Request[list[_Stored]]):
    subject_id: str
    query: str
    budget: int


@dataclass(frozen=True)
class _Assert(_Request[None]):
    subject_id: str
    predicate: str
    value: dict[str, Any]


@dataclass(frozen=True)
class _Retract(_Request[None]):
    fact_id: str


# A batch is written once, as a generator that yields each request and is sent its answer;
# `batch` answers with the blocking client and `abatch` with the async one, so both behave alike.
_Steps = Generator[_Request[Any], Any, T]


def _ask(request: _Request[T]) -> _Steps[T]:
    answer: T = yield request
    return answer


def _stored(fact: Fact) -> _Stored:
    return _Stored(fact.id, fact.predicate, fact.value, fact.recorded_at, fact.last_reinforced_at)


def _page(page: FactPage) -> _Page:
    return _Page([_stored(edge.node) for edge in page.edges], page.page_info.end_cursor, page.page_info.has_next_page)


def _packet_facts(data: dict[str, Any]) -> list[_Stored]:
    context = data["context"]
    return [
        _Stored(
            id=f["id"],
            predicate=f["predicate"],
            value=f["value"],
            recorded_at=datetime.fromisoformat(f["fact"]["recordedAt"]),
            reinforced_at=datetime.fromisoformat(f["fact"]["lastReinforcedAt"])
            if f["fact"]["lastReinforcedAt"]
            else None,
            score=float(f["score"]),
            trace_id=context["traceId"],
        )
        for f in context["facts"]
    ]


# ------------------------------------------------------------------------- filters and matching


def _matches(value: Mapping[str, Any], conditions: Mapping[str, Any] | None) -> bool:
    """LangGraph's filter: each key's value equal to the one given (nested objects compared key
    by key), or passing every operator given ($eq, $ne, $gt, $gte, $lt, $lte)."""
    return all(_compare(value.get(key), expected) for key, expected in (conditions or {}).items())


def _compare(actual: Any, expected: Any) -> bool:
    # As LangGraph's InMemoryStore compares: an object holding any `$` key is a set of operators,
    # any other object and any list are matched part by part.
    if isinstance(expected, dict):
        if any(isinstance(k, str) and k.startswith("$") for k in expected):
            return all(_operator(op, actual, operand) for op, operand in expected.items())
        return isinstance(actual, dict) and all(_compare(actual.get(k), v) for k, v in expected.items())
    if isinstance(expected, list | tuple):
        return (
            isinstance(actual, list | tuple)
            and len(actual) == len(expected)
            and all(_compare(a, e) for a, e in zip(actual, expected))
        )
    return bool(actual == expected)


OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")


def _check_operators(conditions: Any) -> None:
    """Refuse an unknown operator before anything is read, whether or not an item would reach it."""
    if isinstance(conditions, dict):
        for key, value in conditions.items():
            if isinstance(key, str) and key.startswith("$"):
                if key not in OPERATORS:
                    raise ValueError(f"Unsupported filter operator {key!r}: {', '.join(OPERATORS)}.")
            else:
                _check_operators(value)  # an operator's operand is a value, not conditions
    elif isinstance(conditions, list | tuple):
        for value in conditions:
            _check_operators(value)


def _operator(op: str, actual: Any, operand: Any) -> bool:
    if op == "$eq":
        return bool(actual == operand)
    if op == "$ne":
        return bool(actual != operand)
    if op not in OPERATORS:
        raise ValueError(f"Unsupported filter operator {op!r}: {', '.join(OPERATORS)}.")
    # An order is asked of numbers with numbers and strings with strings; an item lacking the
    # field, or holding another type, does not match (rather than failing the whole search).
    numbers = all(isinstance(x, int | float) and not isinstance(x, bool) for x in (actual, operand))
    if not numbers and not (isinstance(actual, str) and isinstance(operand, str)):
        return False
    if op == "$gt":
        return bool(actual > operand)
    if op == "$gte":
        return bool(actual >= operand)
    if op == "$lt":
        return bool(actual < operand)
    return bool(actual <= operand)


def _path_matches(namespace: tuple[str, ...], path: Sequence[str]) -> bool:
    return len(namespace) >= len(path) and all(p in ("*", label) for p, label in zip(path, namespace))


def _condition_holds(namespace: tuple[str, ...], condition: MatchCondition) -> bool:
    path = tuple(condition.path)
    if condition.match_type == "prefix":
        return _path_matches(namespace, path)
    if condition.match_type == "suffix":
        return _path_matches(tuple(reversed(namespace)), tuple(reversed(path)))
    raise ValueError(f"Unsupported match type {condition.match_type!r}: prefix or suffix.")


# ----------------------------------------------------------------------------------- the store


class HakiStore(BaseStore):
    """A LangGraph `BaseStore` whose items are facts of a haki-context server.

    ``graph = builder.compile(store=HakiStore("http://127.0.0.1:8000", api_key=key))``, then in a
    node ``runtime.store.put(("memories", user), "food", {"likes": "sardines"})`` and
    ``runtime.store.search(("memories", user), query="What does the user eat?")``.

    A namespace is a subject (its labels joined with `.`), a key a predicate, a value the fact's
    JSON value (see the module's table). `put` asserts the fact (the previous value is superseded,
    kept in the history); `delete` retracts it; `get` reads the subject's active facts; `search`
    with a query asks `context` for the namespace's subject (under `search_budget` tokens) and
    returns the facts the packet serves, in its order, as `HakiSearchItem`s carrying the score and
    the trace id; without a query, the active facts newest first. Sync graphs use `batch` (the
    blocking client), async ones `abatch` (the asyncio client); each is made at first use from
    `base_url`, `api_key` and `timeout`, or given (`client`, `async_client`: then not closed here).

    Limits, as the API stands:

    - `list_namespaces` lists the namespaces this store has written or read in this process,
      and those given as `namespaces` (the server has no query that lists subjects); a
      namespace stays listed after its last item is deleted.
    - `search(prefix)` covers the prefix's own namespace and the known namespaces under it.
    - a search with a query returns what the packet serves: a fact that does not fit the budget,
      is held in an open conflict, or falls below the recall gate is not returned.
    - `index` is ignored (every fact's text is searched and embedded), and so is `refresh_ttl`;
      a `ttl` raises NotImplementedError (`supports_ttl` is False).
    - created_at is when the value now held was recorded (a new value resets it, as
      LangGraph's InMemoryStore does); updated_at moves when an equal value is put again.
    """

    supports_ttl = False

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        *,
        api_key: str | None = None,
        timeout: float = 30.0,
        search_budget: int = DEFAULT_SEARCH_BUDGET,
        namespaces: Iterable[tuple[str, ...]] = (),
        client: HakiClientSync | None = None,
        async_client: HakiClient | None = None,
    ) -> None:
        self.base_url = base_url
        self.search_budget = search_budget
        self._api_key = api_key
        self._timeout = timeout
        self._client = client
        self._async_client = async_client
        self._owns_client = client is None
        self._owns_async_client = async_client is None
        self._async_loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()
        self._known: set[tuple[str, ...]] = set()
        for namespace in namespaces:
            namespace_to_subject(namespace)  # the same checks as a put's
            self._known.add(tuple(namespace))

    # -------------------------------------------------------------- clients and their lifetime

    @property
    def client(self) -> HakiClientSync:
        """The blocking client `batch` uses (made at first use)."""
        with self._lock:
            if self._client is None:
                self._client = HakiClientSync(self.base_url, api_key=self._api_key, timeout=self._timeout)
                self._share_token(self._async_client, self._client)
            return self._client

    @property
    def async_client(self) -> HakiClient:
        """The asyncio client `abatch` uses (made at first use, and again on another event loop)."""
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        with self._lock:
            if self._async_client is not None and self._owns_async_client and self._async_loop is not loop:
                # An asyncio client's connections belong to the loop it was made on: a graph run by
                # a later asyncio.run gets a client of its own (the old loop, closed, took its sockets).
                previous, self._async_client = self._async_client, None
                self._share_token(previous, self._client)
            if self._async_client is None:
                self._async_client = HakiClient(self.base_url, api_key=self._api_key, timeout=self._timeout)
                self._async_loop = loop
                self._share_token(self._client, self._async_client)
            return self._async_client

    @staticmethod
    def _share_token(source: HakiClient | HakiClientSync | None, target: HakiClient | HakiClientSync | None) -> None:
        # The two clients carry one consistency token: a read through one after a write through
        # the other is served by a replica only once it has replayed that write.
        if source is not None and target is not None and source.consistency_token is not None:
            target.advance_consistency_token(source.consistency_token)

    def close(self) -> None:
        """Close the blocking client this store made (the asyncio one needs `aclose`, or `async with`);
        a later call makes a new one."""
        if self._client is not None and self._owns_client:
            self._client.close()
            self._client = None
        loop = self._async_loop
        if self._async_client is not None and self._owns_async_client and loop is not None and loop.is_closed():
            self._async_client = None  # its loop is gone, and its connections with it

    async def aclose(self) -> None:
        """Close both clients this store made; a later call makes new ones."""
        self.close()
        if self._async_client is not None and self._owns_async_client:
            await self._async_client.aclose()
            self._async_client = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    # ------------------------------------------------------------------------------ the batches

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run the operations in order with the blocking client; one result per operation. As in
        LangGraph's own stores, reads see the memory as it stood before the batch's writes, which
        run last (the last write of a key wins)."""
        steps = self._steps(list(ops))
        answer: Any = None
        while True:
            try:
                request = steps.send(answer)
            except StopIteration as done:
                results: list[Result] = done.value
                return results
            answer = self._answer(request)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """`batch` with the asyncio client."""
        steps = self._steps(list(ops))
        answer: Any = None
        while True:
            try:
                request = steps.send(answer)
            except StopIteration as done:
                results: list[Result] = done.value
                return results
            answer = await self._aanswer(request)

    def _answer(self, request: _Request[Any]) -> Any:
        client = self.client
        if isinstance(request, _ActivePage):
            return _page(
                client.facts(request.subject_id, status=FactStatus.ACTIVE, first=PAGE_SIZE, after=request.after)
            )
        if isinstance(request, _Search):
            variables = {"subjectId": request.subject_id, "query": request.query, "budget": request.budget}
            return _packet_facts(client.execute(SEARCH_DOCUMENT, variables))
        if isinstance(request, _Assert):
            client.assert_fact(request.subject_id, request.predicate, request.value)
        elif isinstance(request, _Retract):
            client.retract_fact(request.fact_id, reason=RETRACT_REASON)
        self._share_token(client, self._async_client)
        return None

    async def _aanswer(self, request: _Request[Any]) -> Any:
        client = self.async_client
        if isinstance(request, _ActivePage):
            page = await client.facts(
                request.subject_id, status=FactStatus.ACTIVE, first=PAGE_SIZE, after=request.after
            )
            return _page(page)
        if isinstance(request, _Search):
            variables = {"subjectId": request.subject_id, "query": request.query, "budget": request.budget}
            return _packet_facts(await client.execute(SEARCH_DOCUMENT, variables))
        if isinstance(request, _Assert):
            await client.assert_fact(request.subject_id, request.predicate, request.value)
        elif isinstance(request, _Retract):
            await client.retract_fact(request.fact_id, reason=RETRACT_REASON)
        self._share_token(client, self._client)
        return None

    def _steps(self, ops: list[Op]) -> _Steps[list[Result]]:
        # Every operation is checked before any is run: a bad one fails the batch with nothing written.
        for op in ops:
            self._check(op)
        results: list[Result] = [None] * len(ops)
        writes: dict[tuple[tuple[str, ...], str], PutOp] = {}
        for index, op in enumerate(ops):
            if isinstance(op, GetOp):
                results[index] = yield from self._get(op)
            elif isinstance(op, SearchOp):
                results[index] = yield from self._search(op)
            elif isinstance(op, ListNamespacesOp):
                results[index] = self._list_namespaces(op)
            elif isinstance(op, PutOp):
                writes.pop((op.namespace, op.key), None)
                writes[(op.namespace, op.key)] = op
        for op in writes.values():
            yield from self._put(op)
        return results

    @staticmethod
    def _check(op: Op) -> None:
        if not isinstance(op, GetOp | SearchOp | ListNamespacesOp | PutOp):
            raise ValueError(f"Unknown operation {op!r}")
        validate_op_namespace(op)
        if isinstance(op, GetOp | PutOp):
            namespace_to_subject(op.namespace)
        if isinstance(op, PutOp) and (not op.key.strip() or len(op.key) > MAX_ID_CHARS or "\x00" in op.key):
            # A key is a fact's predicate: the server would refuse it after the batch's earlier writes.
            raise ValueError(f"A key must be 1..{MAX_ID_CHARS} characters, not blank, without NUL: {op.key!r}")
        if isinstance(op, PutOp) and op.ttl is not None:
            raise NotImplementedError("HakiStore keeps items until deleted: TTL is not supported (ttl=None).")
        if isinstance(op, SearchOp):
            if op.limit < 0 or op.offset < 0:
                raise ValueError("A search's limit and offset must not be negative.")
            _check_operators(op.filter)

    def _remember(self, namespaces: Iterable[tuple[str, ...]]) -> None:
        with self._lock:
            self._known.update(namespaces)

    def _active(self, subject_id: str, enough: int | None = None, key: str | None = None) -> _Steps[list[_Stored]]:
        """The subject's active facts, newest recorded first: every page, or until `enough` facts
        are read, or until one of predicate `key` is."""
        facts: list[_Stored] = []
        after: str | None = None
        while True:
            page = yield from _ask(_ActivePage(subject_id, after))
            facts.extend(page.facts)
            if not page.has_next:
                return facts
            if enough is not None and len(facts) >= enough:
                return facts
            if key is not None and any(f.predicate == key for f in page.facts):
                return facts
            after = page.end_cursor

    def _get(self, op: GetOp) -> _Steps[Item | None]:
        facts = yield from self._active(namespace_to_subject(op.namespace), key=op.key)
        found = next((f for f in facts if f.predicate == op.key), None)
        if found is None:
            return None
        self._remember([op.namespace])
        return HakiItem(
            value=found.item_value,
            key=op.key,
            namespace=op.namespace,
            created_at=found.recorded_at,
            updated_at=found.updated_at,
            fact_id=found.id,
        )

    def _search(self, op: SearchOp) -> _Steps[list[SearchItem]]:
        prefix = tuple(op.namespace_prefix)
        with self._lock:
            namespaces = {ns for ns in self._known if ns[: len(prefix)] == prefix}
        if prefix:
            namespaces.add(prefix)
        wanted = op.offset + op.limit
        # The server takes a query of at most MAX_QUERY_CHARS; the start of a longer one (often a
        # whole user message) says what it is about.
        query = op.query[:MAX_QUERY_CHARS] if op.query and op.query.strip() else None
        found: list[tuple[tuple[str, ...], _Stored]] = []
        for namespace in sorted(namespaces):
            subject_id = namespace_to_subject(namespace)
            if query is not None:
                facts = yield from _ask(_Search(subject_id, query, self.search_budget))
            else:
                # Without a filter the newest `wanted` facts are enough; with one, every page.
                facts = yield from self._active(subject_id, enough=None if op.filter else wanted)
            seen: set[str] = set()
            for fact in facts:
                # One item per key: the first served (or newest), should another client have
                # asserted the predicate twice (mode ADD).
                if fact.predicate not in seen and _matches(fact.item_value, op.filter):
                    seen.add(fact.predicate)
                    found.append((namespace, fact))
        if len(namespaces) > 1:
            # Across subjects: by score (stable, so each packet's order holds at ties), or newest first.
            if query is not None:
                found.sort(key=lambda pair: -(pair[1].score or 0.0))
            else:
                found.sort(key=lambda pair: pair[1].recorded_at, reverse=True)
        chosen = found[op.offset : wanted]
        self._remember(namespace for namespace, _ in chosen)
        return [
            HakiSearchItem(
                namespace,
                fact.predicate,
                fact.item_value,
                fact.recorded_at,
                fact.updated_at,
                fact.score,
                fact_id=fact.id,
                trace_id=fact.trace_id,
            )
            for namespace, fact in chosen
        ]

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        with self._lock:
            namespaces = list(self._known)
        conditions = op.match_conditions or ()
        matching = [ns for ns in namespaces if all(_condition_holds(ns, c) for c in conditions)]
        if op.max_depth is not None:
            matching = list({ns[: op.max_depth] for ns in matching})
        return sorted(matching)[op.offset : op.offset + op.limit]

    def _put(self, op: PutOp) -> _Steps[None]:
        subject_id = namespace_to_subject(op.namespace)
        if op.value is None:
            # Every active fact of the key, should another client have asserted it twice (mode ADD).
            facts = yield from self._active(subject_id)
            for fact in facts:
                if fact.predicate == op.key:
                    yield from _ask(_Retract(fact.id))
            return
        yield from _ask(_Assert(subject_id, op.key, dict(op.value)))
        self._remember([op.namespace])
