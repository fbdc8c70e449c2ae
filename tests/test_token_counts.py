"""Budgets counted in a model's own tokens (core/context/token_counts.py): the encodings' files
checked, each line's cost, and packets whose rendered text never counts more than usedTokens,
nor usedTokens more than the budget, in the tokenizer the call names."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from conftest import GraphQLClient, client_for, make_settings, open_runtime_for
from hypothesis import example, given, settings
from hypothesis import strategies as st

from haki_context.core.context import token_counts
from haki_context.core.context.packing import render
from haki_context.core.context.token_counts import TokenizerUnavailable, counter, encoding, estimate
from haki_context.core.serving.runtime import Runtime
from haki_context.settings import Tokenizer

REPO_ROOT = Path(__file__).resolve().parents[1]
ENCODINGS = (Tokenizer.CL100K_BASE, Tokenizer.O200K_BASE)

CONTEXT = """query($s: String!, $q: String!, $b: Int, $t: Tokenizer) {
  context(subjectId: $s, query: $q, budget: $b, tokenizer: $t) {
    traceId usedTokens budgetTokens rendered
  }
}"""
SETTINGS = "query($id: ID!) { trace(id: $id) { settings { id values } } }"
RECORD = "mutation($i: [EventInput!]!) { recordEvents(inputs: $i) { id } }"


def _count(tokenizer: Tokenizer, text: str) -> int:
    return len(encoding(tokenizer).encode_ordinary(text))


def test_the_estimate_is_a_quarter_of_the_characters_at_least_one() -> None:
    assert estimate("") == 1 and estimate("abc") == 1 and estimate("a" * 40) == 10
    assert counter(Tokenizer.ESTIMATE) is estimate


@pytest.mark.parametrize(
    ("tokenizer", "ids"), [(Tokenizer.CL100K_BASE, [15339, 1917]), (Tokenizer.O200K_BASE, [24912, 2375])]
)
def test_each_encoding_gives_openais_ids(tokenizer: Tokenizer, ids: list[int]) -> None:
    assert encoding(tokenizer).encode_ordinary("hello world") == ids
    text = "Caroline went to the LGBTQ support group on 7 May 2023, and it was 'powerful'. 東京で会いましょう!"
    assert encoding(tokenizer).decode(encoding(tokenizer).encode_ordinary(text)) == text


@pytest.mark.parametrize("tokenizer", ENCODINGS)
def test_each_encoding_splits_text_as_tiktokens_registry_defines_it(tokenizer: Tokenizer) -> None:
    from tiktoken_ext import openai_public

    ranks = encoding(tokenizer)._mergeable_ranks
    with mock.patch.object(openai_public, "load_tiktoken_bpe", return_value=ranks):
        registry = openai_public.ENCODING_CONSTRUCTORS[tokenizer.value]()
    assert registry["pat_str"] == token_counts.PATTERNS[tokenizer]


def test_an_encoding_file_that_is_not_openais_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(token_counts.EXPECTED_SHA256, Tokenizer.O200K_BASE, "0" * 64)
    with pytest.raises(TokenizerUnavailable, match=r"o200k_base.*SHA-256"):
        token_counts.encoding_file(Tokenizer.O200K_BASE)


def test_a_server_whose_encoding_file_is_refused_stops_with_one_line_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from haki_context.startup_errors import error_line

    monkeypatch.setitem(token_counts.EXPECTED_SHA256, Tokenizer.CL100K_BASE, "0" * 64)
    with pytest.raises(TokenizerUnavailable) as refused:
        token_counts.encoding_file(Tokenizer.CL100K_BASE)
    line = error_line(refused.value)
    assert line is not None and line.startswith("haki-context: error: the cl100k_base encoding's file")
    assert line.endswith("(HAKI_TOKENIZER)") and "\n" not in line


@pytest.mark.parametrize("tokenizer", ENCODINGS)
def test_a_line_costs_its_tokens_with_its_line_break(tokenizer: Tokenizer) -> None:
    line = "- [2023-05-08 13:56] Caroline: I went to a LGBTQ support group yesterday."
    assert counter(tokenizer)(line) == max(_count(tokenizer, line + "\n"), _count(tokenizer, line))
    # The line break can merge with the characters before it: alone, this line counts one more.
    assert counter(Tokenizer.CL100K_BASE)("- 0|{") == _count(Tokenizer.CL100K_BASE, "- 0|{") == 5
    assert counter(tokenizer)(line) == counter(tokenizer)(line)  # remembered, the same


@settings(max_examples=2000, deadline=None, derandomize=True)  # the same examples every run, as test_fuzz.py
@example(lines=["0|{"])  # a last line that counts more alone than with its line break
@example(lines=["Yes, last Tuesday!", "  ", "東京 (2023-05-08)"])
@given(lines=st.lists(st.text(st.characters(exclude_characters="\n\r"), max_size=80), min_size=1, max_size=8))
def test_rendered_lines_never_count_more_than_the_sum_of_their_costs(lines: list[str]) -> None:
    served = [f"- {line}" for line in lines]
    for tokenizer in ENCODINGS:
        assert _count(tokenizer, render(served)) <= sum(counter(tokenizer)(line) for line in served)


async def _record_turns(client: GraphQLClient, subject: str, turns: list[str]) -> None:
    events = [
        {
            "subjectId": subject,
            "kind": "message",
            "payload": {"text": t},
            "occurredAt": f"2026-05-{1 + i % 28:02d}T10:00:00Z",
        }
        for i, t in enumerate(turns)
    ]
    await client.execute(RECORD, {"i": events})


async def test_a_call_names_its_tokenizer_and_its_replay_counts_in_it(client: GraphQLClient, subject: str) -> None:
    turns = [f"Caroline told Melanie about painting number {i}: a sunset over the lake, 東京 {i}." for i in range(60)]
    await _record_turns(client, subject, turns)
    packets: dict[str, dict[str, Any]] = {}
    for tokenizer in ("ESTIMATE", "CL100K_BASE", "O200K_BASE"):
        data = await client.execute(CONTEXT, {"s": subject, "q": "what did Caroline paint?", "b": 300, "t": tokenizer})
        packets[tokenizer] = data["context"]
        stored = await client.execute(SETTINGS, {"id": data["context"]["traceId"]})
        packets[tokenizer]["trace"] = stored["trace"]
    for name, tokenizer in (("CL100K_BASE", Tokenizer.CL100K_BASE), ("O200K_BASE", Tokenizer.O200K_BASE)):
        p = packets[name]
        assert p["rendered"] and _count(tokenizer, p["rendered"]) <= p["usedTokens"] <= p["budgetTokens"] == 300
        assert p["trace"]["settings"]["values"]["tokenizer"] == tokenizer.value
    # The estimate keeps the records made before tokenizers could be named (the setting left out).
    assert "tokenizer" not in packets["ESTIMATE"]["trace"]["settings"]["values"]
    assert len({p["trace"]["settings"]["id"] for p in packets.values()}) == 3
    # Real tokens are more than the estimate: the same budget serves less.
    assert packets["CL100K_BASE"]["rendered"].count("\n") < packets["ESTIMATE"]["rendered"].count("\n")

    replay = """query($t: ID!) { replay(traceId: $t) { settings { id } packet { rendered usedTokens } diff { identical } } }"""
    data = await client.execute(replay, {"t": packets["CL100K_BASE"]["traceId"]})
    assert data["replay"]["diff"]["identical"] is True
    assert data["replay"]["settings"]["id"] == packets["CL100K_BASE"]["trace"]["settings"]["id"]
    assert data["replay"]["packet"]["usedTokens"] == packets["CL100K_BASE"]["usedTokens"]
    # The stored trace's rendered text is rebuilt with the tokenizer it was counted in.
    lookup = "query($id: ID!) { trace(id: $id) { rendered } }"
    stored = await client.execute(lookup, {"id": packets["O200K_BASE"]["traceId"]})
    assert stored["trace"]["rendered"] == packets["O200K_BASE"]["rendered"]


async def test_the_servers_tokenizer_is_every_calls_default(migrated: str, hashing_embedder: Any, subject: str) -> None:
    rt: Runtime = await open_runtime_for(migrated, make_settings(migrated, tokenizer="o200k_base"), hashing_embedder)
    client = client_for(rt)
    try:
        await _record_turns(
            client, subject, [f"Melanie ran a charity race for mental health, lap {i}." for i in range(40)]
        )
        data = await client.execute(CONTEXT, {"s": subject, "q": "the charity race", "b": 120})
        p = data["context"]
        stored = await client.execute(SETTINGS, {"id": p["traceId"]})
        assert stored["trace"]["settings"]["values"]["tokenizer"] == "o200k_base"
        assert _count(Tokenizer.O200K_BASE, p["rendered"]) <= p["usedTokens"] <= 120
        data = await client.execute(CONTEXT, {"s": subject, "q": "the charity race", "b": 120, "t": "ESTIMATE"})
        stored = await client.execute(SETTINGS, {"id": data["context"]["traceId"]})
        assert "tokenizer" not in stored["trace"]["settings"]["values"]
    finally:
        await client.http.aclose()
        await rt.pool.close()


async def test_an_unknown_tokenizer_is_invalid_input_or_fails_validation(client: GraphQLClient, subject: str) -> None:
    error = await client.error(CONTEXT, {"s": subject, "q": "anything", "t": "LLAMA"})
    assert error["extensions"]["code"] == "INVALID_INPUT" and "Tokenizer" in error["message"]
    literal = 'query { context(subjectId: "s", query: "q", tokenizer: LLAMA) { usedTokens } }'
    error = await client.error(literal)
    assert error["extensions"]["code"] == "GRAPHQL_VALIDATION_FAILED" and "Tokenizer" in error["message"]


# --- the whole LoCoMo dev set: no packet over its budget in either encoding


async def test_no_locomo_dev_packet_counts_more_than_its_budget_in_either_encoding(runtime: Runtime) -> None:
    sys.path.insert(0, str(REPO_ROOT))  # benchmarks/ is a folder of the repository
    from benchmarks import quality
    from benchmarks.locomo import NEEDS_DATA, data_dir, load_conversation

    folder = data_dir()
    if folder is None:
        pytest.skip(f"this test {NEEDS_DATA}")
    conversations = sorted(folder.glob("*.json"))
    assert conversations, f"LOCOMO_DIR names {folder}, which holds no LoCoMo conversation"
    fields = " ".join(
        f"{name}_{b}: context(subjectId: $s, query: $q, budget: {b}, tokenizer: {name}) {{ usedTokens rendered }}"
        for name in ("CL100K_BASE", "O200K_BASE")
        for b in (900, 2000)
    )
    query = f"query($s: String!, $q: String!) {{ {fields} }}"
    client = quality.Client(runtime)
    packets = over = 0
    try:
        for path in conversations:
            conv = load_conversation(path)
            # Turns as episodes and the session observations as facts: the fullest packets.
            ingested = await quality.ingest(client, conv, "f", "tokens", runtime.settings.episode_excerpt_chars)
            for q in conv.questions:
                data = await client.execute(query, {"s": ingested.subject, "q": q.question})
                for alias, p in data.items():
                    tokenizer = Tokenizer(alias.rsplit("_", 1)[0].lower())
                    budget = int(alias.rsplit("_", 1)[1])
                    packets += 1
                    assert p["usedTokens"] <= budget, (path.name, q.question, alias)
                    over += _count(tokenizer, p["rendered"]) > p["usedTokens"]
    finally:
        await client.aclose()
    assert packets >= 4 * 500 and over == 0
