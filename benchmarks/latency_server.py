"""The latency harness's server: `python -m haki_context.cli serve` as a subprocess with its RSS
sampled, the GraphQL calls made to it, and the server's own timings of those calls (its traces)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, BinaryIO

import httpx
import psutil

from haki_context.core.serving.runtime import Runtime

from .latency_common import PROJECT, REPO_ROOT, SUBJECT, Config, dist, ms_since
from .lean_http import LeanClient

AGENT_QUERY = """query Agent($s: String!, $q: String!, $b: Int) {
  context(subjectId: $s, query: $q, budget: $b) {
    traceId rendered
    facts { id predicate value score }
    episodes { eventId chunk excerpt score }
  }
}"""

DEBUG_QUERY = """query Debug($s: String!, $q: String!, $b: Int) {
  context(subjectId: $s, query: $q, budget: $b) {
    traceId rendered
    facts { id predicate value score }
    episodes { eventId chunk excerpt score }
    trace {
      id
      timings { embedMs retrieveMs packMs persistMs totalMs }
      counts { included excluded blocked }
      decisions {
        itemKind itemId chunk decision reasonCode rank
        score similarity fullText recency distance tokens viaEntity
        fact { predicate }
      }
    }
  }
}"""

RECORD_EVENTS = """mutation Record($inputs: [EventInput!]!) { recordEvents(inputs: $inputs) { id } }"""


class Server:
    """`python -m haki_context.cli serve` on 127.0.0.1, with its RSS sampled; the code is the
    checkout at `root` (this one by default, another revision's worktree for benchmarks.revision_ab)."""

    def __init__(self, dsn: str, cfg: Config, workdir: Path, root: Path = REPO_ROOT) -> None:
        self.dsn, self.cfg, self.workdir, self.root = dsn, cfg, workdir, root
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.peak_rss = 0
        self.ready_rss = 0
        self.startup_s = math.nan
        self._sampler: asyncio.Task[None] | None = None
        self.log_path = workdir / f"server-{self.port}.log"
        self._log: BinaryIO | None = None  # open from start() to stop()

    async def start(self) -> None:
        env = dict(os.environ)
        env.update(
            {
                "HAKI_DATABASE_URL": self.dsn,
                "HAKI_DEV_MODE": "1",
                "HAKI_HOST": "127.0.0.1",
                "HAKI_PORT": str(self.port),
                "HAKI_EMBED_PROVIDER": self.cfg.embedder,
            }
        )
        env.pop("HAKI_TRACE_RETENTION_DAYS", None)
        for name, value in self.cfg.overrides.items():
            env[f"HAKI_{name.upper()}"] = value
        t = time.perf_counter()
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "haki_context.cli", "serve", "--host", "127.0.0.1", "--port", str(self.port)],
            cwd=self.root,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self._sampler = asyncio.create_task(self._sample())
        async with httpx.AsyncClient(timeout=5.0) as client:
            deadline = time.monotonic() + 300
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"the server exited with {self.proc.returncode}:\n{self.log_tail()}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the server was not ready after 300 s:\n{self.log_tail()}")
                with contextlib.suppress(httpx.HTTPError):
                    r = await client.get(f"{self.url}/readyz")
                    if r.status_code == 200:
                        break
                await asyncio.sleep(0.2)
        self.startup_s = time.perf_counter() - t
        self.ready_rss = self._rss()

    def _rss(self) -> int:
        try:
            return psutil.Process(self.proc.pid).memory_info().rss if self.proc else 0
        except psutil.Error:
            return 0

    def hwm(self) -> int | None:
        """The kernel's own peak RSS of the server (VmHWM), where /proc has it."""
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():  # type: ignore[union-attr]
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        except (OSError, ValueError, AttributeError):
            return None
        return None

    async def _sample(self) -> None:
        while self.proc is not None and self.proc.poll() is None:
            self.peak_rss = max(self.peak_rss, self._rss())
            await asyncio.sleep(0.05)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    async def stop(self) -> dict[str, Any]:
        hwm = self.hwm()
        self.peak_rss = max(self.peak_rss, self._rss())
        if self._sampler is not None:
            self._sampler.cancel()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                await asyncio.to_thread(self.proc.wait, 30)
            except subprocess.TimeoutExpired:
                self.proc.terminate()
                try:
                    await asyncio.to_thread(self.proc.wait, 10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    await asyncio.to_thread(self.proc.wait)
        if self._log is not None:  # a server whose start was never reached (another's failed first)
            self._log.close()
        peak = max(self.peak_rss, hwm or 0)
        return {
            "startup_s": round(self.startup_s, 2),
            "rss_ready_mb": round(self.ready_rss / 2**20, 1),
            "peak_rss_sampled_mb": round(self.peak_rss / 2**20, 1),
            "peak_rss_vmhwm_mb": round(hwm / 2**20, 1) if hwm else None,
            "peak_rss_mb": round(peak / 2**20, 1),
        }


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def graphql(
    client: LeanClient | httpx.AsyncClient, query: str, variables: dict[str, Any]
) -> tuple[float, dict[str, Any]]:
    """One GraphQL call: (client-side ms from sending the request to the last byte read, data)."""
    request = {"query": query, "variables": variables}
    t = time.perf_counter()
    if isinstance(client, LeanClient):
        status, raw = await client.post_json("/graphql", request)
        ms = ms_since(t)
    else:
        r = await client.post("/graphql", json=request)
        ms = ms_since(t)
        status, raw = r.status_code, r.content
    body = json.loads(raw)
    if status != 200 or body.get("errors"):
        raise RuntimeError(f"GraphQL call failed ({status}): {str(body)[:500]}")
    return ms, body["data"]


async def closed_loop(
    url: str, query: str, questions: list[str], warm_up: list[str], *, clients: int, budget: int
) -> tuple[float, list[tuple[float, dict[str, Any]]]]:
    """`clients` keep-alive clients at once ask `questions` of the subject, each taking the next
    as soon as its call answers, after one warm-up call each (`warm_up`, which opens its
    connection): the seconds the questions took and each call's (ms, data)."""
    pending = list(reversed(questions))
    calls: list[tuple[float, dict[str, Any]]] = []
    lean = [LeanClient(url) for _ in range(clients)]

    async def client(c: LeanClient) -> None:
        while pending:
            calls.append(await graphql(c, query, {"s": SUBJECT, "q": pending.pop(), "b": budget}))

    try:
        await asyncio.gather(*(graphql(c, query, {"s": SUBJECT, "q": q, "b": budget}) for c, q in zip(lean, warm_up)))
        started = time.perf_counter()
        await asyncio.gather(*(client(c) for c in lean))
        return time.perf_counter() - started, calls
    finally:
        for c in lean:
            await c.aclose()


async def trace_rows(rt: Runtime, ids: list[str]) -> dict[str, dict[str, float]]:
    async with rt.pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT id, embed_ms, retrieve_ms, pack_ms, persist_ms, total_ms FROM context_traces"
            " WHERE project_id = $1 AND id = ANY($2::uuid[])",
            PROJECT,
            ids,
        )
    return {str(r["id"]): dict(r) for r in rows}


def server_side(calls: list[tuple[float, str]], traces: dict[str, dict[str, float]]) -> dict[str, Any]:
    """Client latency minus trace totalMs (GraphQL + HTTP), the server's own breakdown, inferred cache hits."""
    rows = [(ms, traces[i]) for ms, i in calls if i in traces]
    parts = {k: dist([t[f"{k}_ms"] for _, t in rows]) for k in ("embed", "retrieve", "pack", "persist", "total")}
    hits = sum(t["embed_ms"] < 0.05 for _, t in rows)  # a cache hit costs microseconds, an encode milliseconds
    return {
        "overhead_ms": dist([ms - t["total_ms"] for ms, t in rows]),
        "server_breakdown_ms": parts,
        "query_cache_inferred": {"hits": hits, "calls": len(rows), "hit_rate": hits / max(1, len(rows))},
    }
