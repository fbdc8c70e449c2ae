"""The full-text axis: any user text is safe, and one shared stemmed word counts."""

from __future__ import annotations

import pytest
from conftest import GraphQLClient
from contextlib_helpers import assert_fact, context, decisions

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
