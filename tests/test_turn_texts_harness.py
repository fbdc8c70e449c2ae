"""Smoke test of benchmarks/turn_texts.py: one LoCoMo conversation with the hashing embedder
writes every text's recall and hit at every k. The LoCoMo conversations are not shipped: the
test reads their folder from $LOCOMO_DIR and skips without it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))  # benchmarks/ is a folder of the repository, not an installed package

from benchmarks import turn_texts  # noqa: E402
from benchmarks.locomo import NEEDS_DATA, data_dir  # noqa: E402


def test_every_text_gets_recall_and_hit_at_every_k(tmp_path: Path) -> None:
    folder = data_dir()
    if folder is None:
        pytest.skip(f"this test {NEEDS_DATA}")
    assert (
        turn_texts.main(
            ["--data", str(folder), "--conversations", "30", "--embedder", "hashing", "--out", str(tmp_path)]
        )
        == 0
    )
    [written] = tmp_path.glob("turn-texts-*.json")
    report = json.loads(written.read_text())
    assert report["conversations"] == ["30"] and report["embedder"] == "hashing-384-v1"
    assert set(report["results"]) == {*turn_texts.TEXTS, turn_texts.TWO_VECTORS}
    for name, by_k in report["results"].items():
        for figure in ("recall", "hit"):
            values = [by_k[str(k)][figure] for k in turn_texts.KS]
            assert all(0.0 <= v <= 1.0 for v in values), (name, figure, values)
            assert values == sorted(values), f"{name}: more turns never find fewer ({figure})"
        assert by_k[str(turn_texts.KS[-1])]["hit"] > 0, f"{name}: no question found any evidence turn"
    assert written.with_suffix(".md").read_text().startswith("# Turn texts")
