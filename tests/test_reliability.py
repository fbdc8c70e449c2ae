"""Short runs of the load and fault harness (benchmarks/reliability.py) against a real server.

`python -m benchmarks.reliability load` and `faults` run as a user runs them, each for a few
seconds: a `haki-context serve` subprocess on 127.0.0.1 with its own data dir, clients mixing
`context` calls with writes, then every acknowledged write read back and every answered call's
trace looked up. The long versions are the same commands with their default durations
(docs/operations.md, "Reliability").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def harness(tmp_path: Path, *args: str, timeout: float = 400) -> list[dict[str, Any]]:
    out = tmp_path / "result.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HAKI_")}
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.reliability", *args, "--json", str(out)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert out.exists(), f"no result (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    results: list[dict[str, Any]] = json.loads(out.read_text())
    return results


@pytest.fixture(scope="module")
def faults(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, bool], dict[str, Any]]:
    """Every fault once, short: 2 s of load before, 2 s after, the database down 3 s; service
    must be back within 15 s of each fault (docs/operations.md, "Reliability")."""
    args = ["faults", "--clients", "4", "--before", "2", "--after", "2", "--stop-seconds", "3"]
    results = harness(tmp_path_factory.mktemp("faults"), *args, "--recover-timeout", "15")
    return {(r["fault"], r["durable_traces"]): r for r in results}


def no_error(result: dict[str, Any]) -> None:
    assert "error" not in result, f"{result['error']}\n{result.get('server_log', '')}"


def test_load_loses_no_acknowledged_write_or_trace(tmp_path: Path) -> None:
    [result] = harness(tmp_path, "load", "--clients", "4", "--seconds", "3")
    no_error(result)
    assert result["succeeded"] > 0 and result["acknowledged"]["traces"] > 0, result
    assert result["errors"] == {}, result
    assert (result["lost_events"], result["lost_facts"], result["lost_traces"]) == (0, 0, 0), result


@pytest.mark.parametrize("fault", ["pg-restart", "pg-stop", "server-kill"])
def test_the_server_recovers_and_loses_nothing(faults: dict[tuple[str, bool], dict[str, Any]], fault: str) -> None:
    result = faults[(fault, False)]
    no_error(result)
    assert result["recovery_s"] is not None, result["recovery"]
    assert (result["lost_events"], result["lost_facts"], result["lost_traces"]) == (0, 0, 0), result
    # Only a deliberate refusal while the database is away, or a dropped connection of the killed server.
    allowed = {"UNAVAILABLE", "transport:ConnectError", "transport:RemoteProtocolError", "transport:ReadError"}
    assert set(result["errors"]) <= allowed, result["errors"]


def test_kill_9_of_postgres_with_durable_traces_loses_no_acknowledged_trace(
    faults: dict[tuple[str, bool], dict[str, Any]],
) -> None:
    result = faults[("pg-kill", True)]
    no_error(result)
    assert (result["lost_events"], result["lost_facts"], result["lost_traces"]) == (0, 0, 0), result


def test_kill_9_of_postgres_without_durable_traces_loses_no_write(
    faults: dict[tuple[str, bool], dict[str, Any]],
) -> None:
    # Traces commit asynchronously by default: the last fraction of a second may be lost (counted).
    result = faults[("pg-kill", False)]
    no_error(result)
    assert (result["lost_events"], result["lost_facts"]) == (0, 0), result
    assert result["lost_traces"] <= result["acknowledged"]["traces"]


def test_kill_9_of_the_replica_fails_no_call_and_reads_go_on_on_the_primary(
    faults: dict[tuple[str, bool], dict[str, Any]],
) -> None:
    result = faults[("replica-kill", False)]
    no_error(result)
    assert result["errors"] == {}, (result["error_messages"], result.get("server_log"))
    assert (result["lost_events"], result["lost_facts"], result["lost_traces"]) == (0, 0, 0), result
    assert result["reads_before_fault"]["replica"] > 0, result  # the replica served reads before the kill
    assert result["context_answered_after_fault"] > 0, result
    assert result["reads_after_fault"]["primary"] > 0, result
    assert result["ok"], result


@pytest.mark.parametrize("durable", [True, False])
def test_kill_9_of_postgres_is_recovered_by_the_server(
    faults: dict[tuple[str, bool], dict[str, Any]], durable: bool
) -> None:
    result = faults[("pg-kill", durable)]
    no_error(result)
    assert result["recovery_s"] is not None, result["recovery"]
