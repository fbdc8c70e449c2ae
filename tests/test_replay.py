"""`replay(traceId, with:, persist:, compareWithNow:)` through GraphQL: a stored call run again at its
own instant reproduces it; overrides and the memory of now show up in the diff, item by item."""

from __future__ import annotations

import uuid
from typing import Any

from conftest import GraphQLClient
from contextlib_helpers import assert_fact, context, record

from haki_context.core.serving.runtime import Runtime

REPLAY = """
query($id: ID!, $with: ReplayOverrides, $persist: Boolean! = false, $now: Boolean! = false) {
  replay(traceId: $id, with: $with, persist: $persist, compareWithNow: $now) {
    asOf comparedWithNow persisted notes
    settings { id rankingProfile values embedderName }
    packet { traceId rendered usedTokens budgetTokens facts { id value } trace { id asOf settings { id } } }
    original { id createdAt }
    diff {
      identical added removed moved scoreChanged decisionChanged
      changes {
        itemKind itemId chunk kinds rankDelta componentsChanged why
        before { decision reasonCode rank score }
        after { decision reasonCode rank score }
      }
    }
  }
}
"""

TURNS = [
    "Ann said she moved to Lisbon last spring with her dog Rex.",
    "Bruno asked Ann about the harbour festival in Lisbon.",
    "Ann prefers her invoices in French.",
    "The team meeting on Tuesday moved to 3 pm.",
    "Ann's dog Rex loves the beach near Cascais.",
]


async def remember(client: GraphQLClient, subject: str) -> dict[str, str]:
    await record(client, subject, TURNS)
    ids = {}
    for predicate, value in (
        ("home_city", "Lisbon"),
        ("pet", "a dog named Rex"),
        ("invoice_language", "French"),
        ("employer", "Acme"),
    ):
        ids[predicate] = (await assert_fact(client, subject, predicate, value))["fact"]["id"]
    return ids


async def replay(client: GraphQLClient, trace_id: str, **variables: Any) -> dict[str, Any]:
    data = await client.execute(REPLAY, {"id": trace_id, **variables})
    replayed: dict[str, Any] = data["replay"]
    return replayed


async def ask(client: GraphQLClient, subject: str, query: str, budget: int | None = None) -> dict[str, Any]:
    return await context(client, subject, query, budget)


async def test_a_replay_without_overrides_reproduces_the_stored_decisions(client: GraphQLClient, subject: str) -> None:
    await remember(client, subject)
    for query in ("Where does Ann live?", "What is the dog called?", "invoices", "meeting Tuesday"):
        stored = await ask(client, subject, query)
        again = await replay(client, stored["traceId"])
        assert again["diff"]["identical"], again["diff"]["changes"]
        assert again["packet"]["rendered"] == stored["rendered"]
        assert again["asOf"] == stored["trace"]["createdAt"] and not again["comparedWithNow"]
        assert any("exact plan" in n for n in again["notes"])


async def test_a_replay_answers_at_the_calls_instant_whatever_was_written_since(
    client: GraphQLClient, subject: str
) -> None:
    facts = await remember(client, subject)
    stored = await ask(client, subject, "Where does Ann live?")
    await assert_fact(client, subject, "home_city", "Porto")  # supersedes Lisbon
    await record(client, subject, ["Ann moved again, to Porto, in the autumn."])
    await client.execute("mutation($id: ID!) { retractFact(id: $id) { id } }", {"id": facts["pet"]})
    again = await replay(client, stored["traceId"])
    assert again["diff"]["identical"], again["diff"]["changes"]
    assert again["packet"]["rendered"] == stored["rendered"]


async def test_compare_with_now_says_what_was_superseded_retracted_added_and_blocked_since(
    client: GraphQLClient, subject: str
) -> None:
    facts = await remember(client, subject)
    stored = await ask(client, subject, "Where does Ann live and what about her dog and her employer?", 6000)
    new_city = (await assert_fact(client, subject, "home_city", "Porto"))["fact"]["id"]
    await client.execute("mutation($id: ID!) { retractFact(id: $id) { id } }", {"id": facts["pet"]})
    await assert_fact(client, subject, "employer", "Globex", mode="CONTEST")  # Acme is now in an open conflict
    now = await replay(client, stored["traceId"], now=True)
    assert now["comparedWithNow"] and now["asOf"] > stored["trace"]["createdAt"]
    changes = {c["itemId"]: c for c in now["diff"]["changes"]}
    assert changes[facts["home_city"]]["kinds"] == ["REMOVED"]
    assert (
        changes[facts["home_city"]]["why"].startswith("superseded at ")
        and new_city in changes[facts["home_city"]]["why"]
    )
    assert changes[facts["pet"]]["kinds"] == ["REMOVED"] and changes[facts["pet"]]["why"].startswith("retracted at ")
    assert changes[new_city]["kinds"] == ["ADDED"] and "after the call" in changes[new_city]["why"]
    acme = changes[facts["employer"]]
    assert "DECISION_CHANGED" in acme["kinds"] and acme["after"]["reasonCode"] == "CONFLICT_OPEN"
    assert acme["why"].startswith("held in the open conflict set")
    assert now["diff"]["removed"] == 2 and now["diff"]["decisionChanged"] >= 1 and not now["diff"]["identical"]


async def test_overrides_change_the_budget_profile_or_any_decision_setting(client: GraphQLClient, subject: str) -> None:
    await remember(client, subject)
    stored = await ask(client, subject, "Where does Ann live with her dog?", 6000)
    small = await replay(client, stored["traceId"], **{"with": {"budget": 20}})
    assert small["packet"]["budgetTokens"] == 20 and small["packet"]["usedTokens"] <= 20
    assert small["diff"]["decisionChanged"] > 0
    assert all(
        c["after"]["reasonCode"] == "OVER_BUDGET" for c in small["diff"]["changes"] if "DECISION_CHANGED" in c["kinds"]
    )
    classic = await replay(client, stored["traceId"], **{"with": {"profile": "CLASSIC"}})
    assert classic["settings"]["rankingProfile"] == "classic" and classic["settings"]["id"] != small["settings"]["id"]
    assert not classic["diff"]["identical"]
    seed = await replay(client, stored["traceId"], **{"with": {"profile": "SEED"}})  # CLASSIC's former name
    assert seed["settings"] == classic["settings"] and seed["diff"] == classic["diff"]
    flat = await replay(client, stored["traceId"], **{"with": {"settings": {"weight_recency": 0.0}}})
    assert flat["settings"]["values"]["weight_recency"] == 0.0
    assert flat["diff"]["scoreChanged"] > 0
    assert all("recency" not in c["componentsChanged"] for c in flat["diff"]["changes"])  # only the weight moved
    same = await replay(client, stored["traceId"], **{"with": {"currentSettings": True}})
    assert same["diff"]["identical"] and any("current settings" in n for n in same["notes"])


async def test_a_bad_override_is_invalid_input(client: GraphQLClient, subject: str) -> None:
    await remember(client, subject)
    stored = await ask(client, subject, "Where does Ann live?")
    for overrides in ({"settings": {"port": 80}}, {"settings": {"retrieval_top_k": "many"}}, {"settings": [1]}):
        error = await client.error(REPLAY, {"id": stored["traceId"], "with": overrides})
        assert error["extensions"]["code"] == "INVALID_INPUT", error
    error = await client.error(REPLAY, {"id": stored["traceId"], "with": {"budget": 0}})
    assert error["extensions"]["code"] == "BUDGET_EXCEEDED"


async def test_a_replay_writes_a_trace_only_when_asked(client: GraphQLClient, runtime: Runtime, subject: str) -> None:
    await remember(client, subject)
    stored = await ask(client, subject, "Where does Ann live?")

    async def traces() -> int:
        async with runtime.pool.acquire() as conn:
            return int(await conn.fetchval("SELECT count(*) FROM context_traces WHERE subject_id = $1", subject))

    before = await traces()
    dry = await replay(client, stored["traceId"])
    assert not dry["persisted"] and await traces() == before
    lookup = "query($id: ID!) { trace(id: $id) { id asOf settings { id } } }"
    assert (await client.execute(lookup, {"id": dry["packet"]["traceId"]}))["trace"] is None
    kept = await replay(client, stored["traceId"], persist=True)
    assert kept["persisted"] and await traces() == before + 1
    written = (await client.execute(lookup, {"id": kept["packet"]["traceId"]}))["trace"]
    assert written["asOf"] == stored["trace"]["createdAt"] and written["settings"]["id"] == kept["settings"]["id"]


async def test_the_settings_a_call_ran_under_are_recorded_once_and_shown_with_its_trace(
    client: GraphQLClient, runtime: Runtime, subject: str
) -> None:
    await remember(client, subject)
    first, second = await ask(client, subject, "Where?"), await ask(client, subject, "Who?")
    selection = "settings { id rankingProfile values embedderName embedderSpace }"
    query = f"query($id: ID!) {{ trace(id: $id) {{ {selection} }} }}"
    a = (await client.execute(query, {"id": first["traceId"]}))["trace"]["settings"]
    b = (await client.execute(query, {"id": second["traceId"]}))["trace"]["settings"]
    assert a == b and len(a["id"]) == 32
    assert a["rankingProfile"] == runtime.settings.ranking_profile.value
    assert a["values"]["retrieval_top_k"] == runtime.settings.retrieval_top_k
    assert a["embedderName"] == runtime.embedder.name and "port" not in a["values"]


async def test_a_replay_of_an_unknown_pruned_or_forgotten_trace_is_not_found(
    client: GraphQLClient, runtime: Runtime, subject: str
) -> None:
    await remember(client, subject)
    pruned = await ask(client, subject, "Where does Ann live?")
    forgotten = await ask(client, subject, "What is the dog called?")
    async with runtime.pool.acquire() as conn:  # what retention's pruning deletes
        await conn.execute("DELETE FROM trace_decisions WHERE trace_id = $1", uuid.UUID(pruned["traceId"]))
        await conn.execute("DELETE FROM context_traces WHERE id = $1", uuid.UUID(pruned["traceId"]))
    await client.execute("mutation($s: String!) { forgetSubject(subjectId: $s) { traces } }", {"s": subject})
    for trace_id in (pruned["traceId"], forgotten["traceId"], str(uuid.uuid4()), "not-an-id"):
        error = await client.error(REPLAY, {"id": trace_id})
        assert error["extensions"]["code"] == "NOT_FOUND"
        assert "pruned by trace retention, or its subject was forgotten" in error["message"]


async def test_replays_count_against_the_context_fields_of_one_operation(client: GraphQLClient, subject: str) -> None:
    await remember(client, subject)
    stored = await ask(client, subject, "Where does Ann live?")
    fields = " ".join(f'r{i}: replay(traceId: "{stored["traceId"]}") {{ asOf }}' for i in range(6))
    error = await client.error(f"{{ {fields} }}")
    assert error["extensions"]["code"] == "QUERY_TOO_COMPLEX"
    fields = " ".join(f'r{i}: replay(traceId: "{stored["traceId"]}") {{ diff {{ identical }} }}' for i in range(2))
    data = await client.execute(f"{{ {fields} }}")
    assert data["r0"]["diff"]["identical"] and data["r1"]["diff"]["identical"]


async def test_an_unpersisted_replay_with_overrides_still_names_its_settings(
    client: GraphQLClient, subject: str
) -> None:
    await remember(client, subject)
    stored = await ask(client, subject, "Where does Ann live?")
    tuned = await replay(client, stored["traceId"], **{"with": {"settings": {"retrieval_top_k": 8}}})
    assert tuned["packet"]["trace"]["settings"]["id"] == tuned["settings"]["id"]
    assert tuned["settings"]["values"]["retrieval_top_k"] == 8


async def test_every_score_change_says_which_components_moved(client: GraphQLClient, subject: str) -> None:
    facts = await remember(client, subject)
    stored = await ask(client, subject, "Where does Ann live with her dog, and who employs her?", 6000)
    flat = await replay(client, stored["traceId"], **{"with": {"settings": {"weight_recency": 0.0}}})
    rescored = [c for c in flat["diff"]["changes"] if "SCORE_CHANGED" in c["kinds"]]
    assert rescored and len(rescored) == flat["diff"]["scoreChanged"]
    for c in rescored:  # only the weight moved: the score, and nothing it is made of
        before, after = c["before"]["score"], c["after"]["score"]
        assert c["why"] == f"score {before:.3f} -> {after:.3f} ({after - before:+.3f})", c

    # Of the memory now: recency has moved with time, and what changed in memory says more where it tells.
    await assert_fact(client, subject, "employer", "Globex", mode="CONTEST")
    now = await replay(client, stored["traceId"], now=True)
    rescored = [c for c in now["diff"]["changes"] if "SCORE_CHANGED" in c["kinds"]]
    assert rescored and all(c["why"] for c in rescored), rescored
    acme = next(c for c in rescored if c["itemId"] == facts["employer"])
    assert acme["why"].startswith("held in the open conflict set "), acme
    drifted = [c for c in rescored if c["kinds"] == ["SCORE_CHANGED"]]
    assert drifted
    for c in drifted:  # each component that moved, by the name the text gives it
        named = sorted({"fullText": "full text"}.get(n, n) for n in c["componentsChanged"])
        told = sorted(part.split(" -> ")[0].rsplit(" ", 1)[0] for part in c["why"].split("; "))
        assert told == named, c
