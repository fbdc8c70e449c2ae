"""DataLoaders: a packet of 30 facts with source events costs one query for all the events."""

from __future__ import annotations

from conftest import GraphQLClient, StatementLog
from contextlib_helpers import assert_fact, record


async def test_thirty_facts_load_their_source_events_in_one_query(
    logged: tuple[GraphQLClient, StatementLog], subject: str
) -> None:
    client, log = logged
    events = await record(client, subject, [f"event {i}" for i in range(30)])
    for i in range(30):
        await assert_fact(client, subject, f"p{i}", f"value {i}", sourceEventIds=[events[i], events[(i + 1) % 30]])
    log.statements.clear()
    data = await client.execute(
        'query($s: String!) { context(subjectId: $s, query: "value", budget: 5000) {'
        " facts { id sourceEvents { id kind } fact { id status } }"
        " episodes { eventId event { id kind } }"
        " trace { decisions { itemKind fact { predicate } event { id } } } } }",
        {"s": subject},
    )
    facts = data["context"]["facts"]
    assert len(facts) == 30 and all(len(f["sourceEvents"]) == 2 for f in facts)
    event_reads = log.matching("FROM events WHERE project_id = $1 AND id = ANY")
    fact_reads = log.matching("FROM facts WHERE project_id = $1 AND id = ANY")
    assert len(event_reads) == 1  # sourceEvents, Episode.event and TraceDecision.event together
    assert len(fact_reads) == 1  # PacketFact.fact and TraceDecision.fact together
    assert len(log.matching("FROM trace_decisions")) == 0  # the packet's own decisions are in hand
    # candidates, episodes, the trace (one statement), one facts batch, one events batch
    assert len(log.round_trips()) == 5, log.round_trips()


async def test_decision_items_through_fragments_and_aliases_answer_as_the_plain_selection(
    logged: tuple[GraphQLClient, StatementLog], subject: str
) -> None:
    client, log = logged
    events = await record(client, subject, [f"note {i}" for i in range(4)])
    for i in range(6):
        await assert_fact(client, subject, f"q{i}", f"note value {i}", sourceEventIds=[events[i % 4]])
    data = await client.execute(
        'query($s: String!) { context(subjectId: $s, query: "note value") { traceId } }', {"s": subject}
    )
    trace_id = data["context"]["traceId"]
    plain = await client.execute(
        "query($t: ID!) { trace(id: $t) { decisions { itemId fact { predicate } event { id } } } }", {"t": trace_id}
    )
    expected = plain["trace"]["decisions"]
    assert any(d["fact"] for d in expected) and any(d["event"] for d in expected)  # control: both kinds served
    log.statements.clear()
    shaped = await client.execute(
        "fragment F on TraceDecision { fact { predicate } }"
        " query($t: ID!) { trace(id: $t) {"
        "  viaFragments: decisions { itemId ...F ... on TraceDecision { event { id } } }"
        "  onlyIds: decisions { itemId }"
        "  aliased: decisions { itemId f: fact { predicate } e: event { id } } } }",
        {"t": trace_id},
    )
    assert shaped["trace"]["viaFragments"] == expected
    assert [{"itemId": d["itemId"], "f": d["fact"], "e": d["event"]} for d in expected] == shaped["trace"]["aliased"]
    assert len(log.matching("FROM facts WHERE project_id = $1 AND id = ANY")) == 1
    assert len(log.matching("FROM events WHERE project_id = $1 AND id = ANY")) == 1


def test_a_decisions_selection_asking_for_items_is_seen_through_fragments() -> None:
    # ContextTrace.decisions preloads what its selection asks for; fragments must count.
    from strawberry.types.nodes import FragmentSpread, InlineFragment, SelectedField

    from haki_context.schema.packet import _selects

    def field(name: str) -> SelectedField:
        return SelectedField(name=name, directives={}, arguments={}, selections=[], alias=None)

    spread = FragmentSpread(name="F", type_condition="TraceDecision", directives={}, selections=[field("fact")])
    inline = InlineFragment(type_condition="TraceDecision", selections=[field("event")], directives={})
    assert _selects([field("itemId"), spread, inline], "fact")
    assert _selects([field("itemId"), spread, inline], "event")
    assert not _selects([field("itemId"), field("score")], "fact")
