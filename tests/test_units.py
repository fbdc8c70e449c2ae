"""Fast unit tests of the assembler's rules, no database: scoring, packing, entities,
chunking and the input limits. `pytest tests/test_units.py` runs in a second."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from haki_context.core.context.entities import entities, names, query_words
from haki_context.core.context.packing import episode_line, fact_line, pack_section, render
from haki_context.core.context.scoring import Weights, components, recency
from haki_context.core.context.token_counts import estimate as tokens
from haki_context.core.errors import BudgetExceeded, InvalidInput
from haki_context.core.limits import (
    DEFAULT_BUDGET,
    MAX_PAGE_SIZE,
    MAX_QUERY_CHARS,
    check_budget,
    check_confidence,
    check_json_value,
    check_page_size,
    check_subject_id,
    check_validity,
    clean_query,
    parse_id,
    try_parse_id,
)
from haki_context.core.models import Decision, ReasonCode
from haki_context.core.texts import MAX_CHUNK_CHARS, event_chunks, fact_text, served_excerpt, split_long_text
from haki_context.settings import ExcerptFormat, Settings

NOW = datetime(2026, 6, 1, tzinfo=UTC)
W = Weights(similarity=0.6, full_text=0.6, recency=0.15, tau_seconds=30 * 86400.0)

# --- scoring


def test_score_is_the_weighted_sum_of_its_components() -> None:
    at = NOW - timedelta(days=30)
    c = components(0.25, 0.5, at, NOW, W)
    assert c.similarity == 0.75 and c.full_text == 0.5 and c.distance == 0.25
    assert c.recency == pytest.approx(math.exp(-1))
    assert c.score == pytest.approx(0.6 * 0.75 + 0.6 * 0.5 + 0.15 * math.exp(-1))


def test_an_item_dated_in_the_future_counts_as_new() -> None:
    assert recency(NOW + timedelta(days=3), NOW, W.tau_seconds) == 1.0


def test_recency_halves_the_weight_of_older_items_smoothly() -> None:
    values = [recency(NOW - timedelta(days=d), NOW, W.tau_seconds) for d in (0, 1, 10, 100)]
    assert values == sorted(values, reverse=True) and values[0] == 1.0


def test_weights_come_from_the_settings() -> None:
    w = Weights.from_settings(Settings(weight_similarity=0.5, weight_full_text=0.2, recency_tau_days=2))
    assert (w.similarity, w.full_text, w.tau_seconds) == (0.5, 0.2, 2 * 86400.0)


# --- packing


def test_a_line_costs_its_characters_over_four_at_least_one() -> None:
    assert tokens("") == 1 and tokens("abc") == 1 and tokens("a" * 40) == 10


def test_packing_skips_what_does_not_fit_and_goes_on() -> None:
    section = pack_section([5, 8, 2, 1], cost=lambda n: n, budget_left=8, included=ReasonCode.TOP_SCORE)
    assert section.kept == [5, 2, 1] and section.left == 0


def test_pack_section_writes_the_decision_ladder() -> None:
    section = pack_section(
        [30, 50, 4, 9], cost=lambda n: n, budget_left=40, included=ReasonCode.TOP_SCORE, gated=lambda n: n == 9
    )
    assert section.kept == [30, 4] and section.left == 6
    assert [(v.item, v.decision, v.reason) for v in section.verdicts] == [
        (30, Decision.INCLUDED, ReasonCode.TOP_SCORE),
        (50, Decision.EXCLUDED, ReasonCode.OVER_BUDGET),
        (4, Decision.INCLUDED, ReasonCode.TOP_SCORE),
        (9, Decision.EXCLUDED, ReasonCode.BELOW_RELEVANCE_FLOOR),
    ]


def test_a_gated_item_is_excluded_whatever_budget_remains() -> None:
    section = pack_section(["far"], cost=len, budget_left=1000, included=ReasonCode.TOP_SCORE, gated=lambda _: True)
    assert section.kept == [] and section.left == 1000


def test_served_lines_carry_their_dates() -> None:
    assert fact_line("city: Lyon", NOW) == "- city: Lyon (2026-06-01)"
    assert episode_line("Ann: hi", NOW + timedelta(hours=9, minutes=5)) == "- [2026-06-01 09:05] Ann: hi"
    assert render(["- a", "- b"]) == "- a\n- b"


# --- entities


def test_entities_are_capitalised_words_of_the_packed_facts_not_in_the_query() -> None:
    texts = ["manager: Claire runs the office", "colleague: Claire and Bruno share it", "The office is in Lyon"]
    assert entities(texts, "who runs the office in Lyon", 2) == ["Claire", "Bruno"]


def test_sentence_starters_are_not_entities() -> None:
    assert entities(["The plan", "This week", "When Marc calls"], "plan", 5) == ["Marc"]


def test_a_speaker_is_named_when_every_word_of_the_name_is_in_the_query() -> None:
    words = query_words("What did Caroline paint?")
    assert names("Caroline", words) and not names("Caroline Dubois", words) and not names("Melanie", words)
    assert names("Caroline Dubois", query_words("what did caroline dubois say"))


# --- texts and chunking


def test_a_fact_text_reads_its_predicate_and_leaves() -> None:
    assert fact_text("home_city", "Lyon") == "home city: Lyon"
    assert fact_text("prefs", {"lang": "fr", "tags": [1, 2]}) == "prefs: lang fr tags 1 tags 2"


def test_a_turn_is_one_chunk_served_in_its_own_words() -> None:
    (chunk,) = event_chunks("conversation.message", {"speaker": "Ann", "text": "hello"}, 300)
    assert (chunk.text, chunk.is_turn, chunk.speaker) == ("Ann: hello", True, "Ann")
    assert served_excerpt(ExcerptFormat.TEXT, chunk.text, chunk.excerpt, True, 300) == "Ann: hello"
    assert served_excerpt(ExcerptFormat.JSON, chunk.text, chunk.excerpt, True, 300) == chunk.excerpt
    assert chunk.excerpt == 'conversation.message {"speaker":"Ann","text":"hello"}'


def test_a_messages_list_gives_one_chunk_per_message() -> None:
    chunks = event_chunks(
        "chat", {"messages": [{"role": "user", "content": "a"}, {"role": "bot", "content": "b"}]}, 300
    )
    assert [(c.position, c.text) for c in chunks] == [(0, "user: a"), (1, "bot: b")]


def test_a_long_text_splits_on_sentences_under_the_chunk_size() -> None:
    text = " ".join(f"Sentence number {i} is here." for i in range(200))
    pieces = split_long_text(text)
    assert len(pieces) > 1 and all(len(p) <= MAX_CHUNK_CHARS for p in pieces)
    assert " ".join(pieces) == text


def test_a_payload_that_is_not_a_turn_is_one_json_chunk() -> None:
    (chunk,) = event_chunks("tool.call", {"name": "search", "args": {"q": "x"}}, 20)
    assert not chunk.is_turn and chunk.text == '{"name":"search","args":{"q":"x"}}' and len(chunk.excerpt) == 20


# --- input limits


def test_budget_defaults_to_the_contract_default_and_stays_positive() -> None:
    assert check_budget(None, 100_000) == DEFAULT_BUDGET == 900
    for bad in (0, -5, 100_001):
        with pytest.raises(BudgetExceeded):
            check_budget(bad, 100_000)


def test_a_subject_id_is_1_to_128_characters_without_nul() -> None:
    assert check_subject_id("u" * 128) == "u" * 128
    for bad in ("", "   ", "u" * 129, "a\x00b"):
        with pytest.raises(InvalidInput):
            check_subject_id(bad)


def test_a_query_loses_nul_and_must_say_something() -> None:
    assert clean_query("a\x00b") == "ab"
    for bad in ("", "  \x00 ", "q" * (MAX_QUERY_CHARS + 1)):
        with pytest.raises(InvalidInput):
            clean_query(bad)


def test_ids_are_canonical_uuids() -> None:
    assert parse_id("6F9619FF-8B86-D011-B42D-00C04FC964FF") == "6f9619ff-8b86-d011-b42d-00c04fc964ff"
    assert try_parse_id("not-an-id") is None and try_parse_id("") is None
    with pytest.raises(InvalidInput):
        parse_id("nope")


def test_page_size_confidence_and_validity_have_bounds() -> None:
    assert check_page_size(None, 20) == 20
    for bad in (0, MAX_PAGE_SIZE + 1):
        with pytest.raises(InvalidInput):
            check_page_size(bad, 20)
    for bad_confidence in (-0.1, 1.1, math.nan, math.inf):
        with pytest.raises(InvalidInput):
            check_confidence(bad_confidence)
    with pytest.raises(InvalidInput):
        check_validity(NOW, NOW)
    with pytest.raises(InvalidInput):
        check_validity(datetime(2026, 1, 1), None)  # no UTC offset


def test_a_json_value_is_bounded_and_holds_no_nul() -> None:
    assert check_json_value("payload", {"a": 1}, 100) == '{"a":1}'
    with pytest.raises(InvalidInput):
        check_json_value("payload", {"a": "x" * 200}, 100)
    with pytest.raises(InvalidInput):
        check_json_value("payload", {"a": "b\x00"}, 100)
