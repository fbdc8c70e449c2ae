"""With the real all-MiniLM-L6-v2: relevance is about meaning, not shared words."""

from __future__ import annotations

from conftest import GraphQLClient
from contextlib_helpers import assert_fact, context, decisions, record


async def test_invoice_fact_outranks_shoe_fact_for_an_invoice_question(
    minilm_client: GraphQLClient, subject: str
) -> None:
    await assert_fact(minilm_client, subject, "billing_language", "French")
    await assert_fact(minilm_client, subject, "shoe_size", "43 EU")
    await assert_fact(minilm_client, subject, "favourite_sport", "tennis")
    packet = await context(minilm_client, subject, "In which language should I write the bills?")
    ranked = sorted(decisions(packet, itemKind="FACT"), key=lambda d: d["rank"])
    by_id = {f["id"]: f["predicate"] for f in packet["facts"]}
    assert by_id[ranked[0]["itemId"]] == "billing_language"
    assert ranked[0]["similarity"] > ranked[-1]["similarity"]


async def test_closest_episode_by_meaning_comes_first(minilm_client: GraphQLClient, subject: str) -> None:
    await record(
        minilm_client,
        subject,
        ["I adopted a puppy named Rex last week", "The quarterly tax filing is due in April", "We hiked in the Alps"],
    )
    packet = await context(minilm_client, subject, "Tell me about the dog")
    assert "puppy" in packet["episodes"][0]["excerpt"]
