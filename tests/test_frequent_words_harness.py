"""Smoke test of the frequent-words benchmark (benchmarks/frequent_words.py), at a tiny size: both
subjects loaded and timed end to end on the test server, figures written. No timing assertions."""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))  # benchmarks/ is a folder of the repository, not an installed package

from benchmarks import frequent_words  # noqa: E402


def test_the_harness_times_both_subjects_and_writes_their_ratio(pg_uri: str, tmp_path: Path) -> None:
    argv = ["--events", "40", "--facts", "16", "--calls", "5", "--warmup", "1"]
    assert frequent_words.main([*argv, "--database-url", pg_uri, "--out", str(tmp_path)]) == 0
    (result_file,) = tmp_path.glob("frequent-words-*.json")
    result = json.loads(result_file.read_text())
    assert set(result["figures"]) == {"realistic", "frequent"}
    assert all(f["calls"] == 5 and f["p50_ms"] > 0 for f in result["figures"].values())
    assert result["ratio_p50"] == round(
        result["figures"]["frequent"]["p50_ms"] / result["figures"]["realistic"]["p50_ms"], 2
    )
    assert "p50 frequent / realistic" in result_file.with_suffix(".md").read_text()


def test_frequent_texts_repeat_their_words_in_most_rows() -> None:
    import random

    texts = [frequent_words._frequent_text(random.Random(i)) for i in range(200)]
    held = {w: sum(w in t.lower().rstrip(".").split() for t in texts) for w in frequent_words.VOCABULARY}
    assert min(held.values()) > 0.3 * len(texts)  # each word in about half the rows, at least a third
