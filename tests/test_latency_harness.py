"""Smoke test of the latency benchmark (benchmarks/latency.py).

Runs `python -m benchmarks.latency --smoke --embedder hashing` as a user does
(N = 200, a few queries of each kind, a fresh embedded PostgreSQL and a real
server subprocess), with `scope_index_rows` below N so every subject gets its
own HNSW index and the recall check exercises that plan. No timing assertions: it checks the harness runs end
to end and its output holds every figure. The plot needs matplotlib (the `[bench]` extra); without it the
harness skips the plot and says so in the table.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))  # benchmarks/ is a folder of the repository, not an installed package

from benchmarks import latency_report  # noqa: E402
from benchmarks.latency_report import RUN_FIGURES, get, missing_figures  # noqa: E402
from haki_context.db import scope_indexes  # noqa: E402


def test_smoke_run_reports_every_figure(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HAKI_")}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.latency",
            "--smoke",
            "--embedder",
            "hashing",
            "--out",
            str(tmp_path),
            "--cache-dir",
            str(tmp_path / "cache"),
            "--set",
            "scope_index_rows=100",
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    (result_path,) = tmp_path.glob("latency-*-smoke.json")
    result = json.loads(result_path.read_text())
    assert missing_figures(result) == []
    (run,) = result["runs"]
    assert run["n"] == 200 and run["seed"]["subjects"] == 10
    # The subject is 10% of the tables, and the plan-choosing counts match the rows.
    assert run["seed"]["rows"]["facts"] == 10 * run["seed"]["rows"]["subject_facts"] == 2000
    assert run["seed"]["rows"]["episode_chunks"] == 10 * run["seed"]["rows"]["subject_chunks"]
    # Every subject (200 rows each) is past scope_index_rows=100: an index of its own per table.
    assert set(run["seed"]["hnsw_indexes"]) == {
        scope_indexes.index_name(table, "default", subject)
        for subject in ("bench-subject", *(f"bench-other-{k}" for k in range(1, 10)))
        for table in scope_indexes.TABLES
    }
    assert run["recall"]["facts_plan"] == run["recall"]["episodes_plan"] == "hnsw"
    assert 0.0 <= run["recall"]["facts_mean"] <= 1.0 and 0.0 <= run["recall"]["episodes_mean"] <= 1.0
    # Distinct questions: nothing in-process came from the query cache.
    assert run["in_process"]["query_cache"]["hits"] == 0
    assert run["in_process"]["query_cache"]["misses"] >= 6
    assert run["http"]["debug"]["decisions_mean"] > 0
    assert run["ingestion"]["events"] == 100 and run["ingestion"]["chunks"] >= 100
    for path in RUN_FIGURES:
        assert math.isfinite(get(run, path)), path
    assert len(result["loadavg_start"]) == 3 and len(result["loadavg_end"]) == 3

    md = (tmp_path / result_path.name.replace(".json", ".md")).read_text()
    assert "| figure | N = 200 |" in md and "naive" in md and "recall" in md
    png = tmp_path / result_path.name.replace(".json", ".png")
    plots = importlib.util.find_spec("matplotlib") is not None
    if plots:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    else:
        assert not png.exists() and "no plot" in md
    # The embedding cache was written (keyed by embedder), and a second read finds every text.
    assert list((tmp_path / "cache").glob("hashing-384-v1/shard-*.npz"))

    # Results of separate runs (one N each) merge into one table and plot, ordered by N.
    bigger = {**result, "runs": [{**run, "n": 2000}], "command": "python -m benchmarks.latency --n 2000"}
    (tmp_path / "bigger.json").write_text(json.dumps(bigger))
    assert latency_report.main([str(tmp_path / "both"), str(tmp_path / "bigger.json"), str(result_path)]) == 0
    merged = json.loads((tmp_path / "both.json").read_text())
    assert [r["n"] for r in merged["runs"]] == [200, 2000] and missing_figures(merged) == []
    assert "| figure | N = 200 | N = 2,000 |" in (tmp_path / "both.md").read_text()
    if plots:
        assert (tmp_path / "both.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
