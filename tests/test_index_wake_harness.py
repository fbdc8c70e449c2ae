"""Smoke test of the index wake benchmark (benchmarks/index_wake.py), at a tiny size: the harness
runs both variants end to end on the test server and writes its figures. No timing assertions."""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))  # benchmarks/ is a folder of the repository, not an installed package

from benchmarks import index_wake  # noqa: E402


def test_the_harness_times_both_variants_and_writes_its_figures(pg_uri: str, tmp_path: Path) -> None:
    # 30 events stay below the index size: both variants time calls on the exact scan for the whole window.
    argv = ["--events", "30", "--seconds", "0.5", "--after", "0.2", "--database-url", pg_uri, "--out", str(tmp_path)]
    assert index_wake.main(argv) == 0
    (result_file,) = tmp_path.glob("index-wake-*.json")
    result = json.loads(result_file.read_text())
    assert [r["variant"] for r in result["runs"]] == ["woken", "interval only"]
    for run in result["runs"]:
        assert run["ready_after_load_s"] is None
        assert run["exact_scan"]["calls"] > 0 and run["exact_scan"]["p50_ms"] > 0
        assert run["own_index"]["calls"] == 0 and run["settled"]["calls"] == 0
    assert "| woken |" in result_file.with_suffix(".md").read_text()
