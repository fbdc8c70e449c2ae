"""The full-text axis: any user text is safe, one shared stemmed word counts, rare words weigh more."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from conftest import GraphQLClient, client_for
from contextlib_helpers import assert_fact, context, decisions, record, with_settings

from haki_context.core.context.assembler import search_params
from haki_context.core.serving.runtime import Runtime
from haki_context.db import retrieval

HOSTILE = [
    '"); DROP TABLE facts; --',
    "a & | ! <-> :* ' '' \\",
    "-foo",
    "!!!",
    "'",
    "naïve café — 東京 🚀",
    "emoji only 🚀🚀🚀",
    "nul\x00inside",
    "x" * 4000,
    "y" * 2040,  # one word to_tsvector keeps, too long to search with a scope's tag
    " ".join(f"word{i}" for i in range(700))[:4000],
    "the of and to",  # only stop words: an empty full-text query
    "SELECT * FROM facts WHERE 1=1",
]


@pytest.mark.parametrize("query", HOSTILE, ids=range(len(HOSTILE)))
async def test_any_query_text_is_accepted(client: GraphQLClient, subject: str, query: str) -> None:
    await assert_fact(client, subject, "note", "drop table facts is a phrase")
    packet = await context(client, subject, query)
    assert packet["status"] in {"OK", "DEGRADED"}


async def test_one_shared_stemmed_word_gives_a_full_text_component(client: GraphQLClient, subject: str) -> None:
    fact = await assert_fact(client, subject, "billing", "all invoices go to the accounting team")
    other = await assert_fact(client, subject, "hobby", "plays the violin")
    packet = await context(client, subject, "Where should I send the invoice?")
    by_id = {d["itemId"]: d for d in decisions(packet, itemKind="FACT")}
    assert by_id[fact["fact"]["id"]]["fullText"] > 0  # "invoice" and "invoices" share the stem
    assert by_id[other["fact"]["id"]]["fullText"] == 0


async def test_a_rare_word_weighs_more_than_a_common_one(client: GraphQLClient, subject: str) -> None:
    for i in range(6):
        await assert_fact(client, subject, f"meeting_{i}", f"weekly meeting number {i} with the team")
    rare = await assert_fact(client, subject, "hobby", "paddles a kayak on sundays")
    both = await assert_fact(client, subject, "plan", "a kayak meeting on the lake")
    packet = await context(client, subject, "kayak meeting")
    full_text = {d["itemId"]: d["fullText"] for d in decisions(packet, itemKind="FACT")}
    common = [v for k, v in full_text.items() if k not in {rare["fact"]["id"], both["fact"]["id"]}]
    assert len(common) == 6 and max(common) > 0
    assert full_text[rare["fact"]["id"]] > max(common)  # "kayak" is in 2 of 8 facts, "meet" in 7
    assert full_text[both["fact"]["id"]] == pytest.approx(1.0)  # every query lexeme: the whole weight


async def test_episodes_rank_rare_words_the_same_way(client: GraphQLClient, subject: str) -> None:
    common_ids = await record(client, subject, [f"we talked about the weather, part {i}" for i in range(6)])
    (rare_id,) = await record(client, subject, ["the adoption agency called back"])
    packet = await context(client, subject, "talk adoption")
    full_text = {d["itemId"]: d["fullText"] for d in decisions(packet, itemKind="EPISODE")}
    assert full_text[rare_id] > max(full_text[i] for i in common_ids) > 0


async def test_cover_density_rank_stays_selectable(runtime: Runtime, subject: str) -> None:
    c = client_for(with_settings(runtime, full_text_rank="cover_density"))
    try:
        fact = await assert_fact(c, subject, "hobby", "paddles a kayak on sundays")
        packet = await context(c, subject, "kayak kayak trip")
        (row,) = decisions(packet, itemKind="FACT", itemId=fact["fact"]["id"])
        assert 0 < row["fullText"] < 1  # ts_rank_cd of one cover, not a share of the query's weight
    finally:
        await c.http.aclose()


async def test_words_of_any_shape_are_found_in_their_own_scope_only(
    runtime: Runtime, client: GraphQLClient, subject: str
) -> None:
    # The text branch finds rows through the scoped lexemes (migration 0009: each lexeme
    # prefixed by its scope's tag): words holding quotes or backslashes and non-Latin words
    # must match, and a word too long to tag must not fail the write.
    text = "o'brien wrote c:\\temp\\zq9 about 東京 and naïve cafés at example.com/it's"
    odd = await assert_fact(client, subject, "odd", text)
    await assert_fact(client, subject, "long", "y" * 2040 + " tail")
    await assert_fact(client, subject, "filler", "plain filler sentence")
    other = f"{subject}-other"
    other_odd = await assert_fact(client, other, "odd", text)
    # k = 1 and the filler's own vector: the vector branch returns the filler, so the odd
    # fact can only come from the text branch.
    vector = await runtime.embedder.embed_query("plain filler sentence")

    async def candidates(scope: str, query: str) -> set[str]:
        params = search_params(
            runtime.settings, project_id="default", subject_id=scope, vector=vector, query=query, now=datetime.now(UTC)
        )
        async with runtime.pool.acquire() as conn:
            found = await retrieval.fact_candidates(conn, params, 1, 0)
        return {row.id for row, _ in found.candidates}

    for query in ["o'brien", "c:\\temp\\zq9", "東京", "naïve café", "example.com/it's", "tail"]:
        assert odd["fact"]["id"] in await candidates(subject, query) or query == "tail", query
    assert len(await candidates(subject, "tail")) == 2  # the long-token fact, by its other word
    assert await candidates(other, "o'brien") == {other_odd["fact"]["id"]}  # each scope finds its own row
