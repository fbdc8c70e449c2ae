"""benchmarks/candidate_sources.py: relative dates resolved against the day they were said, and a
smoke run (one LoCoMo conversation, the hashing embedder) that writes every pool's figures. The
LoCoMo conversations are not shipped: the smoke run reads their folder from $LOCOMO_DIR and skips
without it."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))  # benchmarks/ is a folder of the repository, not an installed package

from benchmarks import candidate_sources  # noqa: E402
from benchmarks.locomo import NEEDS_DATA, data_dir  # noqa: E402

MONDAY_8_MAY = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


@pytest.mark.parametrize(
    ("phrase", "named"),
    [
        ("yesterday", "07 May 2023"),
        ("Last night", "07 May 2023"),
        ("last Tuesday", "Tuesday 02 May 2023"),
        ("last monday", "Monday 01 May 2023"),  # said on a Monday: the one a week before
        ("last month", "April 2023"),
        ("two weeks ago", "24 April 2023"),
        ("a few days ago", "05 May 2023"),
        ("last year", "2022"),
        ("next month", "June 2023"),
    ],
)
def test_a_relative_date_names_the_day_counted_from_when_it_was_said(phrase: str, named: str) -> None:
    assert candidate_sources.resolve(phrase, MONDAY_8_MAY) == named


def test_a_question_without_its_question_words_reads_as_a_statement() -> None:
    assert (
        candidate_sources.statement("When did Caroline go to the support group?") == "Caroline go to the support group"
    )
    assert candidate_sources.statement("How many kids does Mel have?") == "kids does Mel have"


def test_every_pool_gets_recall_hit_and_size(tmp_path: Path) -> None:
    folder = data_dir()
    if folder is None:
        pytest.skip(f"this test {NEEDS_DATA}")
    args = ["--data", str(folder), "--conversations", "30", "--embedder", "hashing", "--out", str(tmp_path)]
    assert candidate_sources.main(args) == 0
    [written] = tmp_path.glob("candidate-sources-*.json")
    report = json.loads(written.read_text())
    assert report["conversations"] == ["30"] and report["turns_with_relative_dates"] > 0
    results = report["results"]
    assert set(results) == set(candidate_sources.variants())
    today = results["today: vector 64 + text 32"]
    assert 0 < today["hit"] <= 1 and today["pool_turns"] <= 64 + 32
    for name, r in results.items():
        assert 0.0 <= r["served_recall"] <= r["recall"] <= 1.0, name
        if name.startswith(("today's parts", "hierarchical:", "two vectors")) or "feedback: +" in name:
            # These add turns to today's pool: they can only hold more evidence.
            assert r["recall"] >= today["recall"] and r["pool_turns"] >= today["pool_turns"], name
    assert written.with_suffix(".md").read_text().startswith("# Candidate sources")
