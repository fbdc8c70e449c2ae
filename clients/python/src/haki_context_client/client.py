"""`HakiClient` (async) and `HakiClientSync`: the server's operations as typed methods.

Both wrap the generated operations (`_generated`, from schema.graphql and queries.graphql) and
take the same arguments. An argument left at None is not sent, so the server's default applies
(`budget` 900, `first` 50 or 20...). Every failure is raised as a `HakiError` carrying the
server's code; UNAVAILABLE is retried first (see `RetryPolicy`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx

from ._generated.async_operations import AsyncOperations
from ._generated.base_model import UNSET, UnsetType
from ._generated.sync_operations import SyncOperations
from ._transport import AsyncTransport, RetryPolicy, SyncTransport
from .export import ExportCheck
from .types import (
    AssertMode,
    ContextPacket,
    Decision,
    Event,
    EventInput,
    EventPage,
    Fact,
    FactAssertion,
    FactInput,
    FactPage,
    FactStatus,
    ForgetResult,
    ItemKind,
    Replay,
    ReplayOverrides,
    Stats,
    Tokenizer,
    Trace,
    TracePage,
    Volatility,
)

DEFAULT_URL = "http://127.0.0.1:8000"
DEFAULT_KIND = "conversation.message"

T = TypeVar("T")


def _given(value: T | None) -> T | UnsetType:
    """None means "not given": the variable is left out and the server's default applies."""
    return UNSET if value is None else value


def _event_inputs(
    subject_id: str, payloads: Sequence[Any], kind: str, occurred_at: datetime | None
) -> list[EventInput]:
    base: dict[str, Any] = {"subjectId": subject_id, "kind": kind}
    if occurred_at is not None:
        base["occurredAt"] = occurred_at
    return [EventInput.model_validate({**base, "payload": payload}) for payload in payloads]


def _as_event_input(event: EventInput | Mapping[str, Any]) -> EventInput:
    # A mapping may use either name of a field (`subject_id` or `subjectId`).
    return event if isinstance(event, EventInput) else EventInput.model_validate(dict(event))


def _as_fact_input(fact: FactInput | Mapping[str, Any]) -> FactInput:
    return fact if isinstance(fact, FactInput) else FactInput.model_validate(dict(fact))


def _as_overrides(overrides: ReplayOverrides | Mapping[str, Any] | None) -> ReplayOverrides | UnsetType:
    if overrides is None:
        return UNSET
    return overrides if isinstance(overrides, ReplayOverrides) else ReplayOverrides.model_validate(dict(overrides))


def _fact_input(
    subject_id: str,
    predicate: str,
    value: Any,
    *,
    confidence: float | None,
    valid_from: datetime | None,
    valid_to: datetime | None,
    source_event_ids: Sequence[str] | None,
    volatility: Volatility | str | None,
    mode: AssertMode | str | None,
) -> FactInput:
    fields: dict[str, Any] = {"subjectId": subject_id, "predicate": predicate, "value": value}
    optional = {
        "confidence": confidence,
        "validFrom": valid_from,
        "validTo": valid_to,
        "sourceEventIds": list(source_event_ids) if source_event_ids is not None else None,
        "volatility": volatility,
        "mode": mode,
    }
    # Only the fields given are sent: an explicit null would override the server's default.
    fields.update({k: v for k, v in optional.items() if v is not None})
    return FactInput.model_validate(fields)


class HakiClient:
    """Async client of a haki-context server.

    ``async with HakiClient("http://127.0.0.1:8000", api_key=key) as haki:`` then
    ``packet = await haki.context("user-42", "Which language for invoices?")``.

    `api_key` is sent as `Authorization: Bearer <key>` (leave it None against a server in
    development mode). `timeout` is per HTTP request, in seconds. `transport` replaces httpx's
    network transport (tests, proxies).

    Read-your-writes: the client keeps the consistency token of its mutations' responses (the
    highest one) and sends it on every later request, so that a read replica serves the request
    only once it has replayed those writes. `consistency_token` starts it from a token another
    client held; `adopt_query_tokens` also adopts the tokens of queries' responses (a `context`
    call writes its trace), for reading a trace back right after its call.
    """

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        *,
        api_key: str | None = None,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        headers: Mapping[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        consistency_token: str | None = None,
        adopt_query_tokens: bool = False,
    ) -> None:
        self._transport = AsyncTransport(
            base_url,
            api_key=api_key,
            timeout=timeout,
            retry=retry or RetryPolicy(),
            headers=headers,
            transport=transport,
            consistency_token=consistency_token,
            adopt_query_tokens=adopt_query_tokens,
        )
        self.operations = AsyncOperations(self._transport)
        """The generated operations, one method per operation of queries.graphql."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    @property
    def consistency_token(self) -> str | None:
        """The highest consistency token of this client's writes (like `0/16B3748`), sent on
        each request so that a read replica answers only once it has replayed them; None before
        any write. Setting it replaces the one held (None forgets it); ValueError when malformed."""
        return self._transport.consistency.token

    @consistency_token.setter
    def consistency_token(self, token: str | None) -> None:
        self._transport.consistency.replace(token)

    def advance_consistency_token(self, token: str) -> str:
        """Hold `token` (another client's, say) when it is higher than the one held; the token
        held then. ValueError when it is malformed."""
        return self._transport.consistency.advance(token)

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._transport.aclose()

    async def execute(
        self, document: str, variables: Mapping[str, Any] | None = None, operation_name: str | None = None
    ) -> dict[str, Any]:
        """Any GraphQL document: its `data` as a dict (same auth, retries and errors). When the
        operation it runs (`operation_name`'s, or the document's only one) is a mutation, the
        response's consistency token is adopted, as for the methods that write."""
        return await self._transport.execute(document, operation_name, variables)

    # ------------------------------------------------------------------ reads

    async def context(
        self,
        subject_id: str,
        query: str,
        *,
        budget: int | None = None,
        as_of: datetime | None = None,
        tokenizer: Tokenizer | None = None,
    ) -> ContextPacket:
        """The context packet for one subject: what to put in the prompt before a model call.
        With `as_of` (a past instant, timezone-aware), the packet as the memory stood then. With
        `tokenizer` (Tokenizer.CL100K_BASE for GPT-4, O200K_BASE for GPT-4o), the budget and
        `used_tokens` count in that model's tokens instead of the server's default."""
        return (
            await self.operations.context(subject_id, query, _given(budget), _given(as_of), _given(tokenizer))
        ).context

    async def replay(
        self,
        trace_id: str,
        *,
        overrides: ReplayOverrides | Mapping[str, Any] | None = None,
        compare_with_now: bool = False,
        persist: bool = False,
    ) -> Replay:
        """A stored context call asked again at its own instant under the settings it ran under
        (or `overrides`: budget, profile, settings, current_settings), or with `compare_with_now`
        against the memory as it stands now; the new packet and the diff against the stored
        decisions. A trace is written only with `persist`. NotFoundError for a trace unknown,
        pruned or forgotten."""
        result = await self.operations.replay(trace_id, persist, compare_with_now, _as_overrides(overrides))
        return result.replay

    async def trace(
        self, trace_id: str, *, decision: Decision | None = None, item_kind: ItemKind | None = None
    ) -> Trace | None:
        """A context call's trace with its decisions (filtered when asked); None when unknown."""
        return (await self.operations.get_trace(trace_id, _given(decision), _given(item_kind))).trace

    async def traces(
        self,
        *,
        subject_id: str | None = None,
        since: datetime | None = None,
        first: int | None = None,
        after: str | None = None,
    ) -> TracePage:
        """Traces newest first, one page (pass `page.page_info.end_cursor` as `after` for the next)."""
        result = await self.operations.traces(_given(subject_id), _given(since), _given(first), _given(after))
        return result.traces

    async def fact(self, fact_id: str) -> Fact | None:
        """A fact by id; None when unknown or another project's."""
        return (await self.operations.get_fact(fact_id)).fact

    async def facts(
        self,
        subject_id: str,
        *,
        status: FactStatus | None = None,
        first: int | None = None,
        after: str | None = None,
    ) -> FactPage:
        """A subject's facts, newest recorded first, one page."""
        return (await self.operations.facts(subject_id, _given(status), _given(first), _given(after))).facts

    async def event(self, event_id: str) -> Event | None:
        """An event by id; None when unknown or another project's."""
        return (await self.operations.get_event(event_id)).event

    async def events(self, subject_id: str, *, first: int | None = None, after: str | None = None) -> EventPage:
        """A subject's events, latest occurrence first, one page."""
        return (await self.operations.events(subject_id, _given(first), _given(after))).events

    async def stats(self, *, since: datetime | None = None) -> Stats:
        """The project's usage overview over a window (default: all time)."""
        return (await self.operations.stats(_given(since))).stats

    # ----------------------------------------------------------------- writes

    async def remember(
        self,
        subject_id: str,
        payloads: Sequence[Any],
        *,
        kind: str = DEFAULT_KIND,
        occurred_at: datetime | None = None,
    ) -> list[Event]:
        """Record one event per payload (e.g. the turns of a conversation), all or nothing."""
        return await self.record_events(_event_inputs(subject_id, payloads, kind, occurred_at))

    async def record_event(
        self, subject_id: str, kind: str, payload: Any, *, occurred_at: datetime | None = None
    ) -> Event:
        """Record one event."""
        (event,) = _event_inputs(subject_id, [payload], kind, occurred_at)
        return (await self.operations.record_event(event)).record_event

    async def record_events(self, events: Sequence[EventInput | Mapping[str, Any]]) -> list[Event]:
        """Record many events (at most 1000) in one call, all or nothing."""
        recorded = await self.operations.record_events([_as_event_input(e) for e in events])
        return [*recorded.record_events]

    async def assert_fact(
        self,
        subject_id: str,
        predicate: str,
        value: Any,
        *,
        confidence: float | None = None,
        valid_from: datetime | None = None,
        valid_to: datetime | None = None,
        source_event_ids: Sequence[str] | None = None,
        volatility: Volatility | str | None = None,
        mode: AssertMode | str | None = None,
    ) -> FactAssertion:
        """Write a fact; `mode` says what happens to an earlier active fact of the predicate."""
        fact = _fact_input(
            subject_id,
            predicate,
            value,
            confidence=confidence,
            valid_from=valid_from,
            valid_to=valid_to,
            source_event_ids=source_event_ids,
            volatility=volatility,
            mode=mode,
        )
        return (await self.operations.assert_fact(fact)).assert_fact

    async def assert_facts(self, facts: Sequence[FactInput | Mapping[str, Any]]) -> list[FactAssertion]:
        """Write several facts, one call each, in order. Not all or nothing: the first failure is
        raised, and the facts before it stay written."""
        return [(await self.operations.assert_fact(_as_fact_input(f))).assert_fact for f in facts]

    async def retract_fact(self, fact_id: str, *, reason: str | None = None) -> Fact:
        """Take a fact out of service (RETRACTED); it stays readable."""
        return (await self.operations.retract_fact(fact_id, _given(reason))).retract_fact

    # ------------------------------------------------------- forget and export

    async def forget_subject(self, subject_id: str) -> ForgetResult:
        """Delete everything the project holds about the subject, in one transaction (the key needs
        the `erase` scope); the counts deleted per kind."""
        return (await self.operations.forget_subject(subject_id)).forget_subject

    async def export_subject(self, subject_id: str) -> AsyncIterator[dict[str, Any]]:
        """The subject's memory as it streams from `GET /export` (the key needs the `read` scope):
        the header, each event, fact and conflict set, then the `end` line, one dict per line
        (`json.dumps` of each, one per line, is a file `haki-context import` reads). Errors come
        while iterating; a stream cut short raises IncompleteExportError after its last line."""
        check = ExportCheck(subject_id)
        async for line in self._transport.stream_lines("/export", {"subjectId": subject_id}):
            yield check.parse(line)
        check.finish()


class HakiClientSync:
    """Blocking client of a haki-context server; the same methods as `HakiClient`.

    ``with HakiClientSync("http://127.0.0.1:8000", api_key=key) as haki:`` then
    ``packet = haki.context("user-42", "Which language for invoices?")``.
    """

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        *,
        api_key: str | None = None,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        headers: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
        consistency_token: str | None = None,
        adopt_query_tokens: bool = False,
    ) -> None:
        self._transport = SyncTransport(
            base_url,
            api_key=api_key,
            timeout=timeout,
            retry=retry or RetryPolicy(),
            headers=headers,
            transport=transport,
            consistency_token=consistency_token,
            adopt_query_tokens=adopt_query_tokens,
        )
        self.operations = SyncOperations(self._transport)
        """The generated operations, one method per operation of queries.graphql."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def consistency_token(self) -> str | None:
        """The highest consistency token of this client's writes (like `0/16B3748`), sent on
        each request so that a read replica answers only once it has replayed them; None before
        any write. Setting it replaces the one held (None forgets it); ValueError when malformed."""
        return self._transport.consistency.token

    @consistency_token.setter
    def consistency_token(self, token: str | None) -> None:
        self._transport.consistency.replace(token)

    def advance_consistency_token(self, token: str) -> str:
        """Hold `token` (another client's, say) when it is higher than the one held; the token
        held then. ValueError when it is malformed."""
        return self._transport.consistency.advance(token)

    def close(self) -> None:
        """Close the connection pool."""
        self._transport.close()

    def execute(
        self, document: str, variables: Mapping[str, Any] | None = None, operation_name: str | None = None
    ) -> dict[str, Any]:
        """Any GraphQL document: its `data` as a dict (same auth, retries and errors). When the
        operation it runs (`operation_name`'s, or the document's only one) is a mutation, the
        response's consistency token is adopted, as for the methods that write."""
        return self._transport.execute(document, operation_name, variables)

    # ------------------------------------------------------------------ reads

    def context(
        self,
        subject_id: str,
        query: str,
        *,
        budget: int | None = None,
        as_of: datetime | None = None,
        tokenizer: Tokenizer | None = None,
    ) -> ContextPacket:
        """The context packet for one subject: what to put in the prompt before a model call.
        With `as_of` (a past instant, timezone-aware), the packet as the memory stood then. With
        `tokenizer` (Tokenizer.CL100K_BASE for GPT-4, O200K_BASE for GPT-4o), the budget and
        `used_tokens` count in that model's tokens instead of the server's default."""
        return self.operations.context(subject_id, query, _given(budget), _given(as_of), _given(tokenizer)).context

    def replay(
        self,
        trace_id: str,
        *,
        overrides: ReplayOverrides | Mapping[str, Any] | None = None,
        compare_with_now: bool = False,
        persist: bool = False,
    ) -> Replay:
        """A stored context call asked again at its own instant under the settings it ran under
        (or `overrides`: budget, profile, settings, current_settings), or with `compare_with_now`
        against the memory as it stands now; the new packet and the diff against the stored
        decisions. A trace is written only with `persist`. NotFoundError for a trace unknown,
        pruned or forgotten."""
        return self.operations.replay(trace_id, persist, compare_with_now, _as_overrides(overrides)).replay

    def trace(
        self, trace_id: str, *, decision: Decision | None = None, item_kind: ItemKind | None = None
    ) -> Trace | None:
        """A context call's trace with its decisions (filtered when asked); None when unknown."""
        return self.operations.get_trace(trace_id, _given(decision), _given(item_kind)).trace

    def traces(
        self,
        *,
        subject_id: str | None = None,
        since: datetime | None = None,
        first: int | None = None,
        after: str | None = None,
    ) -> TracePage:
        """Traces newest first, one page (pass `page.page_info.end_cursor` as `after` for the next)."""
        return self.operations.traces(_given(subject_id), _given(since), _given(first), _given(after)).traces

    def fact(self, fact_id: str) -> Fact | None:
        """A fact by id; None when unknown or another project's."""
        return self.operations.get_fact(fact_id).fact

    def facts(
        self,
        subject_id: str,
        *,
        status: FactStatus | None = None,
        first: int | None = None,
        after: str | None = None,
    ) -> FactPage:
        """A subject's facts, newest recorded first, one page."""
        return self.operations.facts(subject_id, _given(status), _given(first), _given(after)).facts

    def event(self, event_id: str) -> Event | None:
        """An event by id; None when unknown or another project's."""
        return self.operations.get_event(event_id).event

    def events(self, subject_id: str, *, first: int | None = None, after: str | None = None) -> EventPage:
        """A subject's events, latest occurrence first, one page."""
        return self.operations.events(subject_id, _given(first), _given(after)).events

    def stats(self, *, since: datetime | None = None) -> Stats:
        """The project's usage overview over a window (default: all time)."""
        return self.operations.stats(_given(since)).stats

    # ----------------------------------------------------------------- writes

    def remember(
        self,
        subject_id: str,
        payloads: Sequence[Any],
        *,
        kind: str = DEFAULT_KIND,
        occurred_at: datetime | None = None,
    ) -> list[Event]:
        """Record one event per payload (e.g. the turns of a conversation), all or nothing."""
        return self.record_events(_event_inputs(subject_id, payloads, kind, occurred_at))

    def record_event(self, subject_id: str, kind: str, payload: Any, *, occurred_at: datetime | None = None) -> Event:
        """Record one event."""
        (event,) = _event_inputs(subject_id, [payload], kind, occurred_at)
        return self.operations.record_event(event).record_event

    def record_events(self, events: Sequence[EventInput | Mapping[str, Any]]) -> list[Event]:
        """Record many events (at most 1000) in one call, all or nothing."""
        return [*self.operations.record_events([_as_event_input(e) for e in events]).record_events]

    def assert_fact(
        self,
        subject_id: str,
        predicate: str,
        value: Any,
        *,
        confidence: float | None = None,
        valid_from: datetime | None = None,
        valid_to: datetime | None = None,
        source_event_ids: Sequence[str] | None = None,
        volatility: Volatility | str | None = None,
        mode: AssertMode | str | None = None,
    ) -> FactAssertion:
        """Write a fact; `mode` says what happens to an earlier active fact of the predicate."""
        fact = _fact_input(
            subject_id,
            predicate,
            value,
            confidence=confidence,
            valid_from=valid_from,
            valid_to=valid_to,
            source_event_ids=source_event_ids,
            volatility=volatility,
            mode=mode,
        )
        return self.operations.assert_fact(fact).assert_fact

    def assert_facts(self, facts: Sequence[FactInput | Mapping[str, Any]]) -> list[FactAssertion]:
        """Write several facts, one call each, in order. Not all or nothing: the first failure is
        raised, and the facts before it stay written."""
        return [self.operations.assert_fact(_as_fact_input(f)).assert_fact for f in facts]

    def retract_fact(self, fact_id: str, *, reason: str | None = None) -> Fact:
        """Take a fact out of service (RETRACTED); it stays readable."""
        return self.operations.retract_fact(fact_id, _given(reason)).retract_fact

    # ------------------------------------------------------- forget and export

    def forget_subject(self, subject_id: str) -> ForgetResult:
        """Delete everything the project holds about the subject, in one transaction (the key needs
        the `erase` scope); the counts deleted per kind."""
        return self.operations.forget_subject(subject_id).forget_subject

    def export_subject(self, subject_id: str) -> Iterator[dict[str, Any]]:
        """The subject's memory as it streams from `GET /export` (the key needs the `read` scope):
        the header, each event, fact and conflict set, then the `end` line, one dict per line
        (`json.dumps` of each, one per line, is a file `haki-context import` reads). Errors come
        while iterating; a stream cut short raises IncompleteExportError after its last line."""
        check = ExportCheck(subject_id)
        for line in self._transport.stream_lines("/export", {"subjectId": subject_id}):
            yield check.parse(line)
        check.finish()
