"""Ranking cues beyond the hybrid score: a date the query names, and the neighbours of a strong match."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from conftest import GraphQLClient, client_for, make_settings
from contextlib_helpers import context, decisions

from haki_context.core.context.temporal import DateCue, date_cue
from haki_context.core.serving.runtime import Runtime
from haki_context.settings import RankingProfile, Settings


@pytest.mark.parametrize(
    ("query", "cue"),
    [
        ("When did Melanie go camping in June?", DateCue(6)),
        ("What did Maria donate in December 2023?", DateCue(12, 2023)),
        ("What painting did Melanie show on October 13, 2023?", DateCue(10, 2023, 13)),
        ("What did Gina find on 1 February, 2023?", DateCue(2, 2023, 1)),
        ("What did Gina find on the 3rd of March?", DateCue(3, None, 3)),
        ("what did she say about the move", None),
        ("what happened in june", None),  # a lower-case month is not read as one ("may" is a verb)
    ],
)
def test_a_query_names_a_month_or_a_day(query: str, cue: DateCue | None) -> None:
    assert date_cue(query) == cue


def test_a_named_day_matches_within_a_few_days_and_a_month_any_of_its_days() -> None:
    day = DateCue(10, 2023, 13)
    assert day.matches(datetime(2023, 10, 15, tzinfo=UTC)) and not day.matches(datetime(2023, 10, 20, tzinfo=UTC))
    assert DateCue(6).matches(datetime(2021, 6, 30, tzinfo=UTC)) and not DateCue(6, 2022).matches(
        datetime(2021, 6, 30, tzinfo=UTC)
    )


def test_the_cues_are_on_by_default_and_off_in_classic() -> None:
    s, classic = Settings(), Settings(ranking_profile=RankingProfile.CLASSIC)
    assert s.date_boost > 0 and s.neighbour_weight > 0
    assert classic.date_boost == 0 and classic.neighbour_weight == 0


async def _record_at(c: GraphQLClient, subject: str, turns: list[tuple[str, datetime]]) -> list[str]:
    data = await c.execute(
        "mutation($i: [EventInput!]!) { recordEvents(inputs: $i) { id } }",
        {
            "i": [
                {
                    "subjectId": subject,
                    "kind": "conversation.message",
                    "payload": {"speaker": "Ann", "text": t},
                    "occurredAt": at.isoformat(),
                }
                for t, at in turns
            ]
        },
    )
    return [e["id"] for e in data["recordEvents"]]


def _client(runtime: Runtime, migrated: str, **overrides: float) -> GraphQLClient:
    return client_for(
        Runtime(pool=runtime.pool, embedder=runtime.embedder, settings=make_settings(migrated, **overrides))
    )


async def test_a_turn_dated_in_the_month_the_query_names_ranks_above_the_same_words_at_another_time(
    runtime: Runtime, migrated: str, subject: str
) -> None:
    c = _client(runtime, migrated)
    try:
        may, august = await _record_at(
            c,
            subject,
            [
                ("we packed sandwiches for the picnic", datetime(2023, 5, 10, tzinfo=UTC)),
                ("we packed sandwiches for the picnic", datetime(2023, 8, 10, tzinfo=UTC)),
            ],
        )
        packet = await context(c, subject, "What did we pack for the picnic in May 2023?")
        rows = {d["itemId"]: d for d in decisions(packet, itemKind="EPISODE")}
        s = Settings()
        assert rows[may]["score"] == pytest.approx(rows[august]["score"] + s.date_boost, abs=1e-6)
        assert packet["episodes"][0]["eventId"] == may
    finally:
        await c.http.aclose()


async def test_a_turn_next_to_a_strong_match_gains_a_share_of_its_score(
    runtime: Runtime, migrated: str, subject: str
) -> None:
    c = _client(runtime, migrated, neighbour_weight=0.2, date_boost=0.0)
    try:
        t0 = datetime(2020, 1, 1, 12, tzinfo=UTC)
        strong, beside, apart = await _record_at(
            c,
            subject,
            [
                ("the kayak trip to the lake is on", t0),
                ("we also packed sandwiches", t0.replace(minute=1)),
                ("we also packed sandwiches", t0.replace(month=2)),
            ],
        )
        packet = await context(c, subject, "kayak trip to the lake")
        rows = {d["itemId"]: d for d in decisions(packet, itemKind="EPISODE")}
        # identical words, both years old: only the neighbour's share tells them apart
        base = rows[apart]["score"]
        assert rows[beside]["score"] == pytest.approx(base + 0.2 * (rows[strong]["score"] - 0.2 * base), abs=1e-6)
        assert rows[beside]["score"] > base
    finally:
        await c.http.aclose()
