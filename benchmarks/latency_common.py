"""Names and helpers the latency harness's modules share: the benchmark's subjects, a run's
configuration, distinct questions, and the summary of a distribution of milliseconds."""

from __future__ import annotations

import itertools
import json
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from haki_context.core.context.assembler import start_assembly, written_timings
from haki_context.core.packet import ContextPacket
from haki_context.core.serving.runtime import Runtime

from . import latency_texts

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = Path(__file__).resolve().parent / "results"
DEFAULT_CACHE = Path(__file__).resolve().parent / "cache"
PROJECT = "default"  # the project dev mode serves
SUBJECT = "bench-subject"
OTHERS = [f"bench-other-{k}" for k in range(1, 10)]
INGEST_SUBJECT = "bench-ingest"


def log(message: str) -> None:
    print(f"[{datetime.now().strftime('%H:%M:%S')}] {message}", flush=True)


def dated_result(harness: str, out: Path = DEFAULT_OUT) -> Path:
    """Where a harness's figures go: `<out>/<harness>-<UTC date>.json` (the latest of a day kept)."""
    return out / f"{harness}-{datetime.now(UTC):%Y-%m-%d}.json"


def write_result(result: dict[str, Any], path: Path) -> None:
    """Write a harness's figures to `path` as JSON, stamped with when they were measured, and print them."""
    result.setdefault("measured_at", datetime.now(UTC).isoformat())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    print(f"wrote {path}")


@dataclass
class Config:
    ns: list[int]
    embedder: str = "onnx"
    database_url: str | None = None
    queries: int = 200  # (a) in-process calls
    http_queries: int = 200  # (b) agent selection, one client
    debug_queries: int = 100  # (b) debugging selection, one client
    concurrency: int = 8
    concurrent_calls: int = 320  # (c) in all, over the clients
    sql_pairs: int = 100  # (d) pairs, and the recall queries
    warmup: int = 10
    ingest: int = 1000
    ingest_batch: int = 200
    idle_calls: int = 10  # (a) calls each after idle_s seconds of idleness
    idle_s: float = 2.0
    budget: int = 900
    sigma: float = 0.01
    maintenance_work_mem: str = "1GB"
    cache_dir: Path = DEFAULT_CACHE
    out: Path = DEFAULT_OUT
    label: str = ""
    overrides: dict[str, str] = field(default_factory=dict)
    smoke: bool = False
    keep: bool = False
    reuse: bool = False
    argv: list[str] = field(default_factory=list)


def dist(values: list[float]) -> dict[str, float]:
    """p50/p95/p99, mean, min, max of milliseconds (or any figure)."""
    if not values:
        return {
            "count": 0,
            "p50": math.nan,
            "p95": math.nan,
            "p99": math.nan,
            "mean": math.nan,
            "min": math.nan,
            "max": math.nan,
        }
    a = np.asarray(values, dtype=np.float64)
    p50, p95, p99 = np.percentile(a, [50, 95, 99])
    return {
        "count": len(values),
        "p50": round(float(p50), 3),
        "p95": round(float(p95), 3),
        "p99": round(float(p99), 3),
        "mean": round(float(a.mean()), 3),
        "min": round(float(a.min()), 3),
        "max": round(float(a.max()), 3),
    }


def ms_since(since: float) -> float:
    return (time.perf_counter() - since) * 1000.0


class Questions:
    """Distinct questions for the whole run; every call takes new ones."""

    def __init__(self) -> None:
        self._it: Iterator[str] = latency_texts.questions()
        self.used = 0

    def take(self, k: int) -> list[str]:
        self.used += k
        return list(itertools.islice(self._it, k))


async def assemble(rt: Runtime, project_id: str, subject_id: str, query: str, budget: int | None) -> ContextPacket:
    """One whole `context` call in process, as the harnesses time it: the packet assembled and its
    trace committed (the timings completed by the write's duration)."""
    assembly = await start_assembly(rt, project_id, subject_id, query, budget)
    persist_ms = await assembly.write.committed()
    trace = assembly.packet.trace
    return replace(assembly.packet, trace=replace(trace, timings=written_timings(trace.timings, persist_ms)))
