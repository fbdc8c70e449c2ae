"""The client against a live `haki-context serve` (see conftest.py): every method, both clients,
the Bearer key, and the server's errors raised with their codes."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from haki_context_client import (
    BudgetExceededError,
    ForbiddenError,
    GraphQLRequestError,
    HakiClient,
    HakiClientSync,
    IllegalTransitionError,
    InvalidInputError,
    NotFoundError,
    UnauthenticatedError,
)
from haki_context_client.types import (
    AssertMode,
    AssertOutcome,
    Decision,
    Fact,
    FactStatus,
    ItemKind,
    PacketStatus,
    RankingProfile,
    ReasonCode,
    ReplayChangeKind,
    ReplayOverrides,
    Tokenizer,
    Volatility,
)

from .conftest import LiveServer

CONVERSATION = [
    {"speaker": "Ann", "text": "Please send my invoices in French."},
    {"speaker": "Agent", "text": "Noted: invoices in French from now on."},
]
QUESTION = "Which language should invoices use?"


def test_a_sync_session_records_asserts_and_gets_context_with_its_trace(live_server: LiveServer, subject: str) -> None:
    with HakiClientSync(live_server.url, api_key=live_server.key) as haki:
        events = haki.remember(subject, CONVERSATION)
        assert [e.payload for e in events] == CONVERSATION
        assert all(e.subject_id == subject and e.kind == "conversation.message" for e in events)

        assertion = haki.assert_fact(
            subject, "invoice_language", "French", confidence=0.9, source_event_ids=[events[0].id]
        )
        assert assertion.outcome is AssertOutcome.CREATED
        fact = assertion.fact
        assert fact.status is FactStatus.ACTIVE and fact.value == "French" and fact.confidence == 0.9
        assert fact.source_event_ids == [events[0].id]

        packet = haki.context(subject, QUESTION, budget=500)
        assert packet.budget_tokens == 500 and packet.status is PacketStatus.OK
        assert "French" in packet.rendered
        served = {f.id: f for f in packet.facts}
        assert served[fact.id].reason_code is ReasonCode.TOP_SCORE
        assert served[fact.id].source_event_ids == [events[0].id]

        trace = haki.trace(packet.trace_id)
        assert trace is not None and trace.id == packet.trace_id and trace.query == QUESTION
        included = [d for d in trace.decisions if d.decision is Decision.INCLUDED and d.item_kind is ItemKind.FACT]
        assert [d.item_id for d in included] == [fact.id]
        assert included[0].fact is not None and included[0].fact.predicate == "invoice_language"
        only_episodes = haki.trace(packet.trace_id, item_kind=ItemKind.EPISODE)
        assert only_episodes is not None and all(d.item_kind is ItemKind.EPISODE for d in only_episodes.decisions)

        listed = haki.traces(subject_id=subject)
        assert [edge.node.id for edge in listed.edges] == [packet.trace_id]
        assert listed.edges[0].node.counts.included == trace.counts.included


async def test_an_async_session_pages_reads_and_retracts(live_server: LiveServer, subject: str) -> None:
    async with HakiClient(live_server.url, api_key=live_server.key) as haki:
        first = await haki.record_event(
            subject, "note", {"text": "likes green tea"}, occurred_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
        )
        assert first.occurred_at == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
        await haki.record_events([{"subject_id": subject, "kind": "note", "payload": {"text": "lives in Porto"}}])
        assertions = await haki.assert_facts(
            [
                {"subject_id": subject, "predicate": "drink", "value": "green tea"},
                {"subject_id": subject, "predicate": "city", "value": "Porto", "volatility": Volatility.SLOW},
            ]
        )
        assert [a.fact.predicate for a in assertions] == ["drink", "city"]

        page = await haki.facts(subject, first=1)
        assert len(page.edges) == 1 and page.page_info.has_next_page
        rest = await haki.facts(subject, first=10, after=page.page_info.end_cursor)
        assert {e.node.predicate for e in [*page.edges, *rest.edges]} == {"drink", "city"}

        events = await haki.events(subject)
        assert len(events.edges) == 2 and not events.page_info.has_next_page
        assert await haki.event(first.id) == first

        drink = assertions[0].fact
        retracted = await haki.retract_fact(drink.id, reason="changed their mind")
        assert retracted.status is FactStatus.RETRACTED and retracted.version > drink.version
        assert isinstance(retracted, Fact)
        fetched = await haki.fact(drink.id)
        assert fetched is not None and fetched.status is FactStatus.RETRACTED
        assert [e.node.id for e in (await haki.facts(subject, status=FactStatus.ACTIVE)).edges] == [
            assertions[1].fact.id
        ]
        packet = await haki.context(subject, "What do they drink?")
        assert drink.id not in {f.id for f in packet.facts}

        stats = await haki.stats()
        assert stats.events >= 2 and stats.context_calls >= 1


def test_context_counts_its_budget_in_the_tokenizer_it_names(live_server: LiveServer, subject: str) -> None:
    with HakiClientSync(live_server.url, api_key=live_server.key) as haki:
        haki.remember(subject, CONVERSATION)
        estimated = haki.context(subject, QUESTION, budget=500)
        for tokenizer in (Tokenizer.CL100K_BASE, Tokenizer.O200K_BASE):
            packet = haki.context(subject, QUESTION, budget=500, tokenizer=tokenizer)
            assert packet.rendered == estimated.rendered  # the same lines, counted otherwise
            assert packet.used_tokens != estimated.used_tokens and packet.used_tokens <= 500
        replayed = haki.replay(packet.trace_id)
        assert replayed.diff.identical and replayed.settings.values["tokenizer"] == "o200k_base"


def test_a_new_value_supersedes_and_a_contested_one_opens_a_conflict(live_server: LiveServer, subject: str) -> None:
    with HakiClientSync(live_server.url, api_key=live_server.key) as haki:
        old = haki.assert_fact(subject, "language", "French").fact
        newer = haki.assert_fact(subject, "language", "German")
        assert newer.outcome is AssertOutcome.SUPERSEDED_PREVIOUS
        assert [f.id for f in newer.superseded] == [old.id]
        contested = haki.assert_fact(subject, "language", "Dutch", mode=AssertMode.CONTEST)
        assert contested.outcome is AssertOutcome.CONFLICT_OPENED
        assert contested.conflict is not None and contested.conflict.status.value == "OPEN"


def test_context_as_of_a_past_instant_and_a_replay_show_what_memory_gave_then_and_what_changed_since(
    live_server: LiveServer, subject: str
) -> None:
    with HakiClientSync(live_server.url, api_key=live_server.key) as haki:
        french = haki.assert_fact(subject, "invoice_language", "French").fact
        stored = haki.context(subject, QUESTION)
        trace = haki.trace(stored.trace_id)
        assert trace is not None
        then = trace.created_at
        german = haki.assert_fact(subject, "invoice_language", "German")
        assert [f.id for f in german.superseded] == [french.id]

        past = haki.context(subject, QUESTION, as_of=then)
        assert [f.id for f in past.facts] == [french.id] and "German" not in past.rendered
        assert [f.id for f in haki.context(subject, QUESTION).facts] == [german.fact.id]

        again = haki.replay(stored.trace_id)
        assert again.diff.identical and again.diff.changes == []
        assert again.packet.rendered == stored.rendered and again.as_of == then
        assert not again.compared_with_now and not again.persisted
        assert again.original.id == stored.trace_id and any("exact plan" in n for n in again.notes)

        now = haki.replay(stored.trace_id, compare_with_now=True)
        assert now.compared_with_now and now.as_of > then and not now.diff.identical
        changes = {c.item_id: c for c in now.diff.changes}
        removed = changes[french.id]
        assert removed.kinds == [ReplayChangeKind.REMOVED] and removed.after is None
        assert removed.before is not None and removed.before.fact is not None
        assert removed.before.fact.value == "French"
        assert removed.why is not None and removed.why.startswith("superseded at ") and german.fact.id in removed.why
        assert changes[german.fact.id].kinds == [ReplayChangeKind.ADDED]
        assert (now.diff.removed, now.diff.added) == (1, 1)


async def test_the_async_client_replays_with_overrides_and_raises_the_servers_codes(
    live_server: LiveServer, subject: str
) -> None:
    async with HakiClient(live_server.url, api_key=live_server.key) as haki:
        await haki.assert_fact(subject, "invoice_language", "French")
        stored = await haki.context(subject, QUESTION, budget=600)
        smaller = await haki.replay(stored.trace_id, overrides={"budget": 300})
        assert smaller.packet.budget_tokens == 300 and stored.budget_tokens == 600
        profiled = await haki.replay(stored.trace_id, overrides=ReplayOverrides(profile=RankingProfile.CLASSIC))
        assert profiled.settings.ranking_profile == "classic"
        former = await haki.replay(stored.trace_id, overrides=ReplayOverrides(profile=RankingProfile.SEED))
        assert former.settings == profiled.settings  # SEED: CLASSIC's deprecated former name
        kept = await haki.replay(stored.trace_id, persist=True)
        assert kept.persisted and (await haki.trace(kept.packet.trace_id)) is not None
        with pytest.raises(NotFoundError):
            await haki.replay(str(uuid.uuid4()))
        with pytest.raises(InvalidInputError):
            await haki.context(subject, QUESTION, as_of=datetime(2999, 1, 1, tzinfo=UTC))


def test_the_key_picks_the_project_and_a_bad_key_is_unauthenticated(live_server: LiveServer, subject: str) -> None:
    with HakiClientSync(live_server.url, api_key=live_server.key) as mine:
        fact = mine.assert_fact(subject, "secret", "kept in this project").fact
        assert mine.fact(fact.id) is not None
    with HakiClientSync(live_server.url, api_key=live_server.other_key) as other:
        assert other.fact(fact.id) is None
        assert other.facts(subject).edges == []
    with HakiClientSync(live_server.url) as keyless:  # development mode: project `default`
        assert keyless.fact(fact.id) is None
    with (
        HakiClientSync(live_server.url, api_key="hk_" + "x" * 43) as wrong,
        pytest.raises(UnauthenticatedError) as raised,
    ):
        wrong.context(subject, QUESTION)
    assert raised.value.code == "UNAUTHENTICATED" and raised.value.status_code == 401


async def test_the_async_client_raises_unauthenticated_for_a_bad_key(live_server: LiveServer, subject: str) -> None:
    async with HakiClient(live_server.url, api_key="not-a-key") as wrong:
        with pytest.raises(UnauthenticatedError):
            await wrong.remember(subject, ["hello"])


def test_the_servers_errors_are_raised_with_their_codes(live_server: LiveServer, subject: str) -> None:
    haki = HakiClientSync(live_server.url, api_key=live_server.key)
    with pytest.raises(BudgetExceededError) as budget:
        haki.context(subject, QUESTION, budget=0)
    assert budget.value.code == "BUDGET_EXCEEDED"
    with pytest.raises(NotFoundError):
        haki.retract_fact(str(uuid.uuid4()))
    with pytest.raises(InvalidInputError) as invalid:
        haki.record_event("", "note", {})
    assert invalid.value.code == "INVALID_INPUT"
    fact = haki.assert_fact(subject, "p", 1).fact
    haki.retract_fact(fact.id)
    with pytest.raises(IllegalTransitionError):
        haki.retract_fact(fact.id)
    with pytest.raises(GraphQLRequestError) as invalid_document:
        haki.execute("query { noSuchField }")
    assert invalid_document.value.code == "GRAPHQL_VALIDATION_FAILED"
    with pytest.raises(GraphQLRequestError) as unparsable:
        haki.execute("query {")
    assert unparsable.value.code == "GRAPHQL_PARSE_FAILED"
    haki.close()


def test_execute_runs_any_document_with_the_same_key(live_server: LiveServer, subject: str) -> None:
    with HakiClientSync(live_server.url, api_key=live_server.key) as haki:
        haki.assert_fact(subject, "colour", "blue")
        data = haki.execute(
            "query($s: String!) { facts(subjectId: $s) { edges { node { predicate value } } } }", {"s": subject}
        )
    assert data == {"facts": {"edges": [{"node": {"predicate": "colour", "value": "blue"}}]}}


def test_forget_subject_deletes_what_the_project_holds_about_the_subject(live_server: LiveServer, subject: str) -> None:
    with HakiClientSync(live_server.url, api_key=live_server.key) as haki:
        events = haki.remember(subject, CONVERSATION)
        haki.assert_fact(subject, "invoice_language", "French", source_event_ids=[events[0].id])
        packet = haki.context(subject, QUESTION)
    with HakiClientSync(live_server.url, api_key=live_server.eraser_key) as eraser:
        forgotten = eraser.forget_subject(subject)
    assert forgotten.subject_id == subject and forgotten.erasure_id
    assert (forgotten.events, forgotten.facts, forgotten.traces) == (2, 1, 1)
    with HakiClientSync(live_server.url, api_key=live_server.key) as haki:
        assert haki.facts(subject).edges == [] and haki.events(subject).edges == []
        assert haki.traces(subject_id=subject).edges == [] and haki.trace(packet.trace_id) is None
        assert haki.context(subject, QUESTION).facts == []
        assert [line.get("type") for line in haki.export_subject(subject)] == [None, "end"]


def test_a_read_only_key_reads_and_exports_but_cannot_write(live_server: LiveServer, subject: str) -> None:
    with HakiClientSync(live_server.url, api_key=live_server.key) as writer:
        writer.assert_fact(subject, "colour", "blue")
    with HakiClientSync(live_server.url, api_key=live_server.reader_key) as reader:
        assert "blue" in reader.context(subject, "Which colour?").rendered
        assert [line.get("type") for line in reader.export_subject(subject)] == [None, "fact", "end"]
        with pytest.raises(ForbiddenError) as raised:
            reader.assert_fact(subject, "colour", "red")
    assert raised.value.code == "FORBIDDEN"


async def test_forget_subject_needs_a_key_with_the_erase_scope(live_server: LiveServer, subject: str) -> None:
    async with HakiClient(live_server.url, api_key=live_server.key) as haki:  # read and write only
        fact = (await haki.assert_fact(subject, "kept", True)).fact
        with pytest.raises(ForbiddenError) as raised:
            await haki.forget_subject(subject)
        assert raised.value.code == "FORBIDDEN"
        assert await haki.fact(fact.id) is not None


def test_export_subject_streams_the_header_every_record_and_the_end_line(live_server: LiveServer, subject: str) -> None:
    with HakiClientSync(live_server.url, api_key=live_server.key) as haki:
        events = haki.remember(subject, CONVERSATION)
        fact = haki.assert_fact(subject, "invoice_language", "French", source_event_ids=[events[1].id]).fact
        lines = list(haki.export_subject(subject))
    header, *records, end = lines
    assert header["format"] == "haki-context/subject" and header["subjectId"] == subject
    assert sorted(r["id"] for r in records if r["type"] == "event") == sorted(e.id for e in events)
    (exported,) = [r for r in records if r["type"] == "fact"]
    assert (exported["id"], exported["value"], exported["sourceEventIds"]) == (fact.id, "French", [events[1].id])
    assert end == {"type": "end", "events": 2, "facts": 1, "conflicts": 0}


async def test_the_async_export_streams_too_and_a_bad_key_is_refused(live_server: LiveServer, subject: str) -> None:
    async with HakiClient(live_server.url, api_key=live_server.key) as haki:
        await haki.record_event(subject, "note", {"text": "hello"})
        kinds = [line.get("type") async for line in haki.export_subject(subject)]
    assert kinds == [None, "event", "end"]
    async with HakiClient(live_server.url, api_key="hk_" + "y" * 43) as wrong:
        with pytest.raises(UnauthenticatedError):
            [line async for line in wrong.export_subject(subject)]
