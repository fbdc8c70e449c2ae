"""Scale-out: `python -m benchmarks.scale_out` (workers, a streaming replica, consistency tokens).

    python -m benchmarks.scale_out                                   # N = 10,000, a fresh embedded PostgreSQL
    python -m benchmarks.scale_out --data-dir DIR --reuse            # keep the seeded cluster in DIR, reuse it
    python -m benchmarks.scale_out --n 50 --embedder hashing --seconds 1.5 --pairs 5   # a smoke run

One subject of N facts + N events among 10 such subjects, seeded as `benchmarks.latency` seeds
it (its database `haki_bench_<N>`, its embedding cache, its scope indexes), served by real
`haki-context serve` subprocesses on 127.0.0.1 (development mode, the onnx embedder by default:
it is what costs the CPU; `--embedder` or HAKI_EMBED_PROVIDER changes it). Every call is an
agent's `context` call (budget 900, the latency harness's agent selection) with a question no
other call of the same server asked.

(a) Workers: `--clients` (16) closed-loop clients, each on a keep-alive connection opened
    before the load (10 ms apart, as agents connect over time), against `serve --workers 1`
    then `--workers 2` on the same database with the same questions in the same order:
    `--warmup` seconds (5), then a timed window of `--seconds` (30). Calls per second at
    saturation, p50 / p99, the ratio 2 workers / 1, the connections each worker holds (the
    kernel hands each new connection to one of them; also how as many opened at once land)
    and each one's CPU in the window, with the machine's, PostgreSQL's and the clients' CPU.
(b) A replica: a hot standby of the primary made with db/standby.py (pg_basebackup, streaming
    replication), then the same load (one worker) on a server without replicas and on one with
    HAKI_REPLICA_URLS naming the standby, the standby running for both; where its reads went
    (/metrics `haki_reads`), and `--check` (20) questions asked of both servers with the same
    facts and episodes served. One machine runs the primary, the standby and the clients.
(c) Consistency tokens, on the server with the replica, one client: `--pairs` (200) pairs, each
    a `recordEvent` followed at once by a `context` call carrying the write's token, and a
    `recordEvent` followed by the same kind of call without it (the order alternating); the
    extra time the token costs (p50 / p99 with it against without it), and where the token
    calls were served (/metrics `haki_consistency_waits`). Twice: the replica current, then
    lagging `--lag-ms` (100) behind (`recovery_min_apply_delay` on the standby, ALTER SYSTEM
    and pg_reload_conf()).

Admission is raised for the benchmark (`admission_queue` 64, `admission_wait_s` 30: the
defaults refuse calls past 10 waiting, and 16 clients on one worker would be shed, not
measured); `--set NAME=VALUE` overrides a setting of every server. Every server, the standby
and (unless `--data-dir`) the embedded PostgreSQL and its data are removed at the end; with
`--database-url` the benchmark database is dropped unless `--keep`. Output:
`results/scale-out-<date>.json` and `.md` (`-<label>` with `--label`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import math
import os
import platform
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import asyncpg
import orjson
import psutil
from prometheus_client.parser import text_string_to_metric_families

from haki_context.app import open_runtime
from haki_context.core.serving.consistency import TOKEN_HEADER
from haki_context.db import embedded, standby
from haki_context.settings import EmbedProvider, Settings

from . import latency_texts
from .latency_common import DEFAULT_CACHE, DEFAULT_OUT, INGEST_SUBJECT, REPO_ROOT, SUBJECT, Config, dist, log
from .latency_databases import create_database, database_dsn, drop_database, prepare, seeded
from .latency_server import AGENT_QUERY

HARNESS = "scale-out"
# Admission raised so that saturation is measured, not shed (the defaults refuse past 10 waiting).
BENCH_SETTINGS = {"admission_queue": "64", "admission_wait_s": "30"}
RECORD_EVENT = (
    "mutation($s: String!, $t: String!) "
    '{ recordEvent(input: {subjectId: $s, kind: "note", payload: {text: $t}}) { id } }'
)
ROUTING_NOTE = "On one machine this shows the routing's cost and correctness, not capacity."
STARTED_LINE = "Application startup complete."
# Seconds between the clients' connections: opened at once, they land on one worker.
CONNECT_GAP_S = 0.01
SERVE = [sys.executable, "-m", "haki_context.cli", "serve"]


# ---------------------------------------------------------------- the HTTP client


class Answer(NamedTuple):
    status: int
    headers: dict[str, str]
    body: bytes


class _Closed(Exception):
    """The server closed a kept connection before answering a byte."""


class HttpClient:
    """One keep-alive HTTP/1.1 connection (benchmarks/lean_http.py's client, with headers both
    ways): a request at a time, answers with a Content-Length."""

    def __init__(self, base_url: str, *, timeout: float = 120.0) -> None:
        parts = urlsplit(base_url)
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or 80
        self._timeout = timeout
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    @property
    def local_port(self) -> int | None:
        """This side's port of the open connection (None when none is open)."""
        if self._writer is None:
            return None
        return int(self._writer.get_extra_info("sockname")[1])

    async def connect(self) -> None:
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(self._host, self._port)

    async def post(self, path: str, body: Any, headers: dict[str, str] | None = None) -> Answer:
        return await self.request("POST", path, orjson.dumps(body), headers)

    async def request(
        self, method: str, path: str, payload: bytes = b"", headers: dict[str, str] | None = None
    ) -> Answer:
        """One exchange; a kept connection the server closed meanwhile is replaced once."""
        if self._writer is not None:
            try:
                return await self._bounded(method, path, payload, headers)
            except _Closed:
                await self.aclose()
        return await self._bounded(method, path, payload, headers)

    async def _bounded(self, method: str, path: str, payload: bytes, headers: dict[str, str] | None) -> Answer:
        try:
            return await asyncio.wait_for(self._exchange(method, path, payload, headers), self._timeout)
        except BaseException:
            await self.aclose()  # out of step: the next call opens a new connection
            raise

    async def _exchange(self, method: str, path: str, payload: bytes, headers: dict[str, str] | None) -> Answer:
        await self.connect()
        assert self._reader is not None and self._writer is not None
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self._writer.write(
            f"{method} {path} HTTP/1.1\r\nhost: {self._host}:{self._port}\r\ncontent-type: application/json\r\n"
            f"{extra}content-length: {len(payload)}\r\n\r\n".encode()
            + payload
        )
        try:
            head = await self._reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            if getattr(exc, "partial", b""):
                raise
            raise _Closed from exc
        status_line, *lines = head.decode("latin-1").split("\r\n")
        found = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines if h)}
        if "content-length" not in found:
            raise RuntimeError(f"an answer without content-length: {status_line} {found}")
        data = await self._reader.readexactly(int(found["content-length"]))
        if found.get("connection", "").lower() == "close":
            await self.aclose()
        return Answer(int(status_line.split(" ", 2)[1]), found, data)

    async def aclose(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = self._reader = None


def graphql_data(answer: Answer) -> dict[str, Any]:
    """The answer's data; RuntimeError when the call failed."""
    body = orjson.loads(answer.body)
    if answer.status != 200 or body.get("errors"):
        raise RuntimeError(f"GraphQL call failed ({answer.status}): {str(body)[:300]}")
    return dict(body["data"])


# ---------------------------------------------------------------- questions


class QuestionBook:
    """The benchmark's distinct questions in one fixed order: a run asks them from a given
    index on, so two runs ask the same questions in the same order."""

    def __init__(self) -> None:
        self._it: Iterator[str] = latency_texts.questions()
        self._list: list[str] = []
        self.high = 0  # one past the highest index asked

    def __getitem__(self, index: int) -> str:
        while len(self._list) <= index:
            self._list.extend(itertools.islice(self._it, 1000))
        self.high = max(self.high, index + 1)
        return self._list[index]


# ---------------------------------------------------------------- the server


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Serve:
    """`haki-context serve --workers N` as a subprocess on 127.0.0.1, on an existing database."""

    def __init__(
        self, dsn: str, *, workers: int, embedder: str, settings: dict[str, str], workdir: Path, replicas: str = ""
    ) -> None:
        self.dsn, self.workers, self.embedder, self.settings = dsn, workers, embedder, settings
        self.replicas = replicas
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / f"server-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    async def start(self, timeout: float = 300.0) -> float:
        """Start it; the seconds until every worker has started and /readyz answers 200."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("HAKI_")}
        env.update(
            {
                "HAKI_DATABASE_URL": self.dsn,
                "HAKI_DEV_MODE": "1",
                "HAKI_EMBED_PROVIDER": self.embedder,
                "HAKI_METRICS": "public",
            }
        )
        if self.replicas:
            env["HAKI_REPLICA_URLS"] = self.replicas
        env.update({f"HAKI_{name.upper()}": value for name, value in self.settings.items()})
        started = time.monotonic()
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                [*SERVE, "--host", "127.0.0.1", "--port", str(self.port), "--workers", str(self.workers)],
                cwd=REPO_ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        client = HttpClient(self.url, timeout=5.0)
        try:
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"the server exited with {self.proc.returncode}:\n{self.log_tail()}")
                if time.monotonic() - started > timeout:
                    raise RuntimeError(f"the server was not ready after {timeout:g} s:\n{self.log_tail()}")
                # Every worker started: connections opened before would all land on the first.
                if self._started_workers() >= self.workers:
                    with contextlib.suppress(OSError, RuntimeError, _Closed, TimeoutError):
                        if (await client.request("GET", "/readyz")).status == 200:
                            return time.monotonic() - started
                await asyncio.sleep(0.2)
        finally:
            await client.aclose()

    def _started_workers(self) -> int:
        try:
            return self.log_path.read_text(errors="replace").count(STARTED_LINE)
        except OSError:
            return 0

    def worker_pids(self) -> list[int]:
        """The processes that serve: the workers under the parent, or the server itself."""
        if self.proc is None:
            return []
        try:
            children = psutil.Process(self.proc.pid).children()
            workers = [c.pid for c in children if any("spawn_main" in part for part in c.cmdline())]
        except psutil.Error:
            return []
        return workers or [self.proc.pid]

    def server_pids(self) -> list[int]:
        """The server's processes: the parent and its children."""
        if self.proc is None:
            return []
        try:
            return [self.proc.pid, *(c.pid for c in psutil.Process(self.proc.pid).children(recursive=True))]
        except psutil.Error:
            return [self.proc.pid]

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    async def stop(self) -> None:
        """SIGTERM (the parent stops its workers), then SIGKILL of whatever is left after 60 s."""
        if self.proc is None:
            return
        pids = self.server_pids()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(self.proc.wait, 60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                await asyncio.to_thread(self.proc.wait)
        for pid in pids[1:]:  # a worker the parent could not stop
            with contextlib.suppress(psutil.Error):
                child = psutil.Process(pid)
                if any("spawn_main" in part or "resource_tracker" in part for part in child.cmdline()):
                    child.kill()


# ---------------------------------------------------------------- CPU accounting


def cpu_of(pids: list[int]) -> dict[int, float]:
    """CPU seconds (user + system) each live process of `pids` has used."""
    out: dict[int, float] = {}
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            t = psutil.Process(pid).cpu_times()
            out[pid] = t.user + t.system
    return out


def postgres_pids(postmasters: list[int]) -> list[int]:
    pids: list[int] = []
    for pm in postmasters:
        with contextlib.suppress(psutil.Error):
            pids += [pm, *(c.pid for c in psutil.Process(pm).children(recursive=True))]
    return pids


async def postmaster_of(dsn: str) -> int | None:
    """The postmaster of the server at `dsn` when it runs on this machine (its backend's parent)."""
    conn = await asyncpg.connect(dsn)
    try:  # while the backend lives
        parent = psutil.Process(int(await conn.fetchval("SELECT pg_backend_pid()"))).ppid()
        return parent if "postgres" in psutil.Process(parent).name() else None
    except psutil.Error:
        return None
    finally:
        await conn.close()


@dataclass
class CpuWindow:
    """CPU seconds at a window's start, to compare with its end."""

    machine: Any = None
    server: dict[int, float] = field(default_factory=dict)
    postgres: dict[int, float] = field(default_factory=dict)
    client: float = 0.0

    @classmethod
    def now(cls, server: list[int], postgres: list[int]) -> CpuWindow:
        me = psutil.Process().cpu_times()
        return cls(psutil.cpu_times(), cpu_of(server), cpu_of(postgres), me.user + me.system)


def cores(before: dict[int, float], after: dict[int, float], seconds: float) -> float:
    """Cores the processes used on average over `seconds` (a process new since `before` from 0)."""
    return round(sum(t - before.get(pid, 0.0) for pid, t in after.items()) / seconds, 2)


def busy_share(before: Any, after: Any) -> float:
    """The share of the machine's CPU time that was not idle between two psutil.cpu_times()."""
    total = sum(after) - sum(before)
    idle = (after.idle + getattr(after, "iowait", 0.0)) - (before.idle + getattr(before, "iowait", 0.0))
    return round(1.0 - idle / total, 3) if total > 0 else 0.0


# ---------------------------------------------------------------- (a) and (b): the closed-loop load


async def closed_loop(
    server: Serve,
    book: QuestionBook,
    *,
    first: int,
    clients: int,
    warmup_s: float,
    seconds: float,
    budget: int,
    postmasters: list[int],
) -> dict[str, Any]:
    """`clients` clients on keep-alive connections, each calling again when answered, asking
    the book's questions from `first` on; figures of the calls that end in the timed window."""
    conns = [HttpClient(server.url) for _ in range(clients)]
    for c in conns:  # one after the other, as agents connect: a burst lands on one worker (burst_spread)
        await c.connect()
        await asyncio.sleep(CONNECT_GAP_S)
    await asyncio.sleep(0.2)  # every connection accepted by its worker
    workers = server.worker_pids()
    spread = _connections(workers, server.port, {c.local_port for c in conns})
    next_index = itertools.count(first)
    ended: list[tuple[float, float]] = []  # (end, ms) of answered calls
    failed: list[str] = []
    start = time.perf_counter()
    window_start, window_end = start + warmup_s, start + warmup_s + seconds

    async def client(c: HttpClient) -> None:
        while time.perf_counter() < window_end:
            request = {"query": AGENT_QUERY, "variables": {"s": SUBJECT, "q": book[next(next_index)], "b": budget}}
            t = time.perf_counter()
            try:
                answer = await c.post("/graphql", request)
                graphql_data(answer)
            except Exception as exc:  # a failed call is counted, and the client goes on
                failed.append(f"{type(exc).__name__}: {exc}"[:300])
                continue
            done = time.perf_counter()
            ended.append((done, (done - t) * 1000.0))

    async def sample() -> tuple[CpuWindow, CpuWindow]:
        await asyncio.sleep(max(0.0, window_start - time.perf_counter()))
        first_sample = CpuWindow.now(server.server_pids(), postgres_pids(postmasters))
        await asyncio.sleep(max(0.0, window_end - time.perf_counter()))
        return first_sample, CpuWindow.now(server.server_pids(), postgres_pids(postmasters))

    try:
        sampler = asyncio.create_task(sample())
        await asyncio.gather(*(client(c) for c in conns))
        before, after = await sampler
    finally:
        for c in conns:
            await c.aclose()
    timed = [ms for end, ms in ended if window_start <= end <= window_end]
    per_worker = [
        {
            "pid": pid,
            "connections": spread.get(pid, 0),
            "cpu_cores": cores({pid: before.server.get(pid, 0.0)}, {pid: after.server.get(pid, 0.0)}, seconds),
        }
        for pid in workers
    ]
    return {
        "workers": len(workers),
        "clients": clients,
        "warmup_s": warmup_s,
        "seconds": seconds,
        "answered": len(timed),
        "calls_per_s": round(len(timed) / seconds, 2),
        "latency_ms": dist(timed),
        "failed": len(failed),
        "failures": failed[:5],
        "questions": next(next_index) - first,
        "per_worker": per_worker,
        "cpu": {
            "machine_busy_share": busy_share(before.machine, after.machine),
            "server_cores": cores(before.server, after.server, seconds),
            "postgres_cores": cores(before.postgres, after.postgres, seconds),
            "client_cores": round((after.client - before.client) / seconds, 2),
        },
        "loadavg_1min": round(os.getloadavg()[0], 2),
    }


async def burst_spread(server: Serve, clients: int) -> list[int]:
    """How `clients` connections opened at once land on the workers (each worker's count)."""
    conns = [HttpClient(server.url) for _ in range(clients)]
    try:
        await asyncio.gather(*(c.connect() for c in conns))
        await asyncio.sleep(0.2)
        spread = _connections(server.worker_pids(), server.port, {c.local_port for c in conns})
    finally:
        for c in conns:
            await c.aclose()
    return sorted(spread.values(), reverse=True)


def _connections(workers: list[int], port: int, client_ports: set[int | None]) -> dict[int, int]:
    """How many of the clients' connections each worker holds."""
    out: dict[int, int] = {}
    for pid in workers:
        with contextlib.suppress(psutil.Error):
            conns = psutil.Process(pid).net_connections(kind="tcp")
            out[pid] = sum(
                1 for c in conns if c.laddr and c.laddr.port == port and c.raddr and c.raddr.port in client_ports
            )
    return out


async def served(server: Serve, book: QuestionBook, count: int, budget: int) -> list[list[str]]:
    """The facts and episodes served for the book's first `count` questions, one call each."""
    client = HttpClient(server.url)
    out = []
    try:
        for i in range(count):
            request = {"query": AGENT_QUERY, "variables": {"s": SUBJECT, "q": book[i], "b": budget}}
            packet = graphql_data(await client.post("/graphql", request))["context"]
            out.append(
                [f"fact:{f['id']}" for f in packet["facts"]]
                + [f"episode:{e['eventId']}:{e['chunk']}" for e in packet["episodes"]]
            )
    finally:
        await client.aclose()
    return out


# ---------------------------------------------------------------- /metrics


async def metrics(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample /metrics exposes, keyed by (name, sorted labels)."""
    client = HttpClient(url)
    try:
        answer = await client.request("GET", "/metrics")
    finally:
        await client.aclose()
    if answer.status != 200:
        raise RuntimeError(f"/metrics answered {answer.status}")
    out = {}
    for family in text_string_to_metric_families(answer.body.decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = float(s.value)
    return out


def where_reads_went(before: dict[Any, float], after: dict[Any, float]) -> dict[str, float]:
    """Read statements on the replicas and on the primary, and token waits by outcome, between two scrapes."""

    def delta(name: str, label: str, value: str | None) -> float:
        total = 0.0
        for (sample, labels), v in after.items():
            here = dict(labels).get(label)
            if sample == name and here is not None and (here == value if value else here != "primary"):
                total += v - before.get((sample, labels), 0.0)
        return total

    return {
        "reads_replica": delta("haki_reads_total", "target", None),
        "reads_primary": delta("haki_reads_total", "target", "primary"),
        "token_waits_replica": delta("haki_consistency_waits_total", "outcome", "replica"),
        "token_waits_primary": delta("haki_consistency_waits_total", "outcome", "primary"),
    }


async def replica_state(url: str) -> str:
    client = HttpClient(url)
    try:
        body = orjson.loads((await client.request("GET", "/readyz")).body)
    finally:
        await client.aclose()
    replicas = body.get("replicas") or [{}]
    return str(replicas[0].get("state", "none"))


async def wait_healthy(url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while (state := await replica_state(url)) != "healthy":
        if time.monotonic() > deadline:
            raise RuntimeError(f"the replica is {state}, not healthy, after {timeout:g} s")
        await asyncio.sleep(0.2)


# ---------------------------------------------------------------- (c): consistency tokens


async def token_pairs(
    server: Serve, book: QuestionBook, *, first: int, pairs: int, warmup: int, budget: int
) -> dict[str, Any]:
    """Pairs of (a write, then a context call with its token) and (a write, then a call
    without it), the order alternating; the calls' milliseconds and where the token calls went."""
    client = HttpClient(server.url)
    index = itertools.count(first)
    with_ms: list[float] = []
    without_ms: list[float] = []
    differences: list[float] = []
    before: dict[Any, float] = {}
    try:
        for i in range(warmup + pairs):
            if i == warmup:
                before = await metrics(server.url)
            times: dict[bool, float] = {}
            for with_token in (True, False) if i % 2 == 0 else (False, True):
                q = book[next(index)]
                wrote = await client.post(
                    "/graphql", {"query": RECORD_EVENT, "variables": {"s": INGEST_SUBJECT, "t": f"The user said: {q}"}}
                )
                graphql_data(wrote)
                token = wrote.headers.get(TOKEN_HEADER.lower())
                if token is None:
                    raise RuntimeError(f"a write's answer without {TOKEN_HEADER}: {wrote.headers}")
                request = {"query": AGENT_QUERY, "variables": {"s": SUBJECT, "q": book[next(index)], "b": budget}}
                t = time.perf_counter()
                graphql_data(await client.post("/graphql", request, {TOKEN_HEADER: token} if with_token else None))
                times[with_token] = (time.perf_counter() - t) * 1000.0
            if i >= warmup:
                with_ms.append(times[True])
                without_ms.append(times[False])
                differences.append(times[True] - times[False])
        after = await metrics(server.url)
    finally:
        await client.aclose()
    with_d, without_d = dist(with_ms), dist(without_ms)
    return {
        "pairs": pairs,
        "with_token_ms": with_d,
        "without_token_ms": without_d,
        "extra_p50_ms": round(with_d["p50"] - without_d["p50"], 2),
        "extra_p99_ms": round(with_d["p99"] - without_d["p99"], 2),
        "per_pair_extra_ms": dist(differences),
        "routing": where_reads_went(before, after),
        "questions": next(index) - first,
    }


async def set_apply_delay(standby_uri: str, delay_ms: float | None) -> None:
    """`recovery_min_apply_delay` on the standby (ALTER SYSTEM, pg_reload_conf()); None resets it."""
    conn = await asyncpg.connect(standby_uri)
    try:
        if delay_ms is None:
            await conn.execute("ALTER SYSTEM RESET recovery_min_apply_delay")
        else:
            await conn.execute(f"ALTER SYSTEM SET recovery_min_apply_delay = '{int(delay_ms)}ms'")
        await conn.execute("SELECT pg_reload_conf()")
    finally:
        await conn.close()
    want = "0" if delay_ms is None else f"{int(delay_ms)}ms"
    deadline = time.monotonic() + 10.0
    while True:  # the reload is asynchronous: a new session shows it once applied
        conn = await asyncpg.connect(standby_uri)
        try:
            now = await conn.fetchval("SHOW recovery_min_apply_delay")
        finally:
            await conn.close()
        if now == want:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"recovery_min_apply_delay is {now}, not {want}, 10 s after the reload")
        await asyncio.sleep(0.1)


# ---------------------------------------------------------------- the run


@dataclass
class Options:
    n: int
    workers: list[int]
    clients: int
    warmup: float
    seconds: float
    pairs: int
    pairs_warmup: int
    lag_ms: float
    check: int
    skip_replica: bool
    budget: int
    embedder: str
    database_url: str | None
    data_dir: Path | None
    keep: bool
    reuse: bool
    settings: dict[str, str]
    cache_dir: Path
    out: Path
    label: str
    argv: list[str]


async def _data_owner(uri: str) -> str | None:
    """The OS user the local server at `uri` runs as, when it is not this process's (None otherwise)."""
    conn = await asyncpg.connect(uri)
    try:
        path = Path(str(await conn.fetchval("SHOW data_directory")))
    finally:
        await conn.close()
    try:
        owner = pwd.getpwuid(path.stat().st_uid).pw_name
    except (OSError, KeyError):
        return None
    return None if owner == pwd.getpwuid(os.geteuid()).pw_name else owner


async def seed_database(o: Options, base: str) -> tuple[str, dict[str, Any]]:
    """The database of N facts + N events: a kept one reused (`--reuse`) or a new one seeded."""
    name = f"haki_bench_{o.n}"
    reused = o.reuse and await seeded(base, name, o.n)
    dsn = database_dsn(base, name) if reused else await create_database(base, name)
    cfg = Config(ns=[o.n], embedder=o.embedder, cache_dir=o.cache_dir, overrides=o.settings)
    settings = Settings(database_url=dsn, embed_provider=EmbedProvider(o.embedder), dev_mode=True)
    rt, stack = await open_runtime(settings)  # migrates a new database, loads the embedder
    async with stack:
        report = await prepare(rt, cfg, o.n, dsn, reused=reused)
    return dsn, report


async def measure(o: Options, result: dict[str, Any], workdir: Path) -> None:
    pg: embedded.EmbeddedPostgres | None = None
    replica_dir = workdir / "standby"
    made_standby: standby.Standby | None = None
    base = o.database_url
    dsn: str | None = None
    try:
        if base is None:
            data_dir = o.data_dir or workdir / "data"
            log(f"starting an embedded PostgreSQL in {data_dir}")
            pg = await asyncio.to_thread(embedded.start, data_dir)
            base = pg.uri
        dsn, result["seed"] = await seed_database(o, base)
        primary_pm = await postmaster_of(dsn)
        book = QuestionBook()
        first = o.check  # the load asks from here on; the check questions come first

        async def serving(workers: int, replicas: str = "") -> Serve:
            server = Serve(
                dsn or "", workers=workers, embedder=o.embedder, settings=o.settings, workdir=workdir, replicas=replicas
            )
            ready = await server.start()
            log(f"  server with {workers} worker(s){' and the replica' if replicas else ''} ready in {ready:.1f} s")
            return server

        async def load(server: Serve, postmasters: list[int]) -> dict[str, Any]:
            run = await closed_loop(
                server,
                book,
                first=first,
                clients=o.clients,
                warmup_s=o.warmup,
                seconds=o.seconds,
                budget=o.budget,
                postmasters=postmasters,
            )
            log(
                f"  {run['calls_per_s']} calls/s, p50 {run['latency_ms']['p50']} ms, p99 {run['latency_ms']['p99']} ms,"
                f" failed {run['failed']}, connections per worker {[w['connections'] for w in run['per_worker']]},"
                f" CPU per worker {[w['cpu_cores'] for w in run['per_worker']]}"
            )
            return run

        # (a) workers
        result["workers"] = {}
        for workers in o.workers:
            log(f"(a) {o.clients} clients against {workers} worker(s): {o.warmup:g} s warm-up, {o.seconds:g} s timed")
            server = await serving(workers)
            try:
                burst = await burst_spread(server, o.clients) if workers > 1 else None
                result["workers"][str(workers)] = await load(server, [p for p in [primary_pm] if p])
                result["workers"][str(workers)]["burst_connections_per_worker"] = burst
            except BaseException:
                print(server.log_tail(), file=sys.stderr)
                raise
            finally:
                await server.stop()

        if o.skip_replica:
            return
        # (b) a streaming replica
        log(f"(b) a streaming standby of the primary in {replica_dir}")
        t = time.perf_counter()
        system_user = pg._server.system_user if pg is not None else await _data_owner(base)
        made_standby = await asyncio.to_thread(standby.create, base, replica_dir, system_user=system_user)
        result["standby"] = {"created_s": round(time.perf_counter() - t, 1), "system_user": system_user}
        replica_dsn = database_dsn(made_standby.uri, urlsplit(dsn).path.lstrip("/"))
        postmasters = [p for p in [primary_pm, embedded.postmaster_pid(made_standby.pgdata)] if p]
        result["replica"] = {"note": ROUTING_NOTE}
        answers: dict[str, list[list[str]]] = {}
        for label, replicas in (("primary_only", ""), ("with_replica", replica_dsn)):
            log(f"(b) {label.replace('_', ' ')}: {o.clients} clients, 1 worker")
            server = await serving(1, replicas)
            try:
                if replicas:
                    await wait_healthy(server.url)
                answers[label] = await served(server, book, o.check, o.budget)
                before = await metrics(server.url)
                run = await load(server, postmasters)
                run["routing"] = where_reads_went(before, await metrics(server.url))
                result["replica"][label] = run
                if replicas:
                    # (c) consistency tokens, on this server
                    result["tokens"] = {}
                    for phase, delay in (("current", None), ("lagging", o.lag_ms)):
                        if delay is not None:
                            log(f"(c) the standby {delay:g} ms behind (recovery_min_apply_delay)")
                            await set_apply_delay(made_standby.uri, delay)
                        log(f"(c) replica {phase}: {o.pairs} pairs of a write and a context call, token or none")
                        await wait_healthy(server.url)
                        tokens = await token_pairs(
                            server, book, first=book.high, pairs=o.pairs, warmup=o.pairs_warmup, budget=o.budget
                        )
                        tokens["replica_state_after"] = await replica_state(server.url)
                        result["tokens"][phase] = tokens
                        log(
                            f"  with token p50 {tokens['with_token_ms']['p50']} / p99 {tokens['with_token_ms']['p99']} ms,"
                            f" without p50 {tokens['without_token_ms']['p50']} / p99 {tokens['without_token_ms']['p99']}"
                            f" ms; token calls on the replica {tokens['routing']['token_waits_replica']:g},"
                            f" on the primary {tokens['routing']['token_waits_primary']:g}"
                        )
                    await set_apply_delay(made_standby.uri, None)
            except BaseException:
                print(server.log_tail(), file=sys.stderr)
                raise
            finally:
                await server.stop()
        same = sum(a == b for a, b in zip(answers["primary_only"], answers["with_replica"]))
        result["replica"]["same_answers"] = {"same": same, "asked": o.check}
        result["questions_used"] = book.high
    finally:
        if made_standby is not None or (replica_dir / standby.MARKER).exists():
            with contextlib.suppress(Exception):
                await asyncio.to_thread(standby.stop, replica_dir)
            if made_standby is not None and not made_standby.socket_dir.is_relative_to(replica_dir):
                shutil.rmtree(made_standby.socket_dir, ignore_errors=True)
        if o.database_url is not None and dsn is not None and not o.keep:
            with contextlib.suppress(Exception):
                await drop_database(o.database_url, f"haki_bench_{o.n}")
        if pg is not None:
            await asyncio.to_thread(pg.close)


def machine() -> dict[str, Any]:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
    }


def run(o: Options) -> dict[str, Any]:
    started = time.perf_counter()
    result: dict[str, Any] = {
        "benchmark": HARNESS,
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join(["python", "-m", "benchmarks.scale_out", *o.argv]),
        "machine": machine(),
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
        "n": o.n,
        "embedder": o.embedder,
        "budget": o.budget,
        "settings": o.settings,
        "lag_ms": o.lag_ms,
    }
    workdir = Path(tempfile.mkdtemp(prefix="haki-scale-out-"))
    try:
        asyncio.run(measure(o, result, workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    result["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    result["wall_s"] = round(time.perf_counter() - started, 1)
    return result


# ---------------------------------------------------------------- the table


def _lat(run: dict[str, Any]) -> str:
    return f"{run['calls_per_s']}; {run['latency_ms']['p50']:.1f} / {run['latency_ms']['p99']:.1f}"


def rows(result: dict[str, Any]) -> list[tuple[str, str]]:
    """The table's rows: (figure, result)."""
    out: list[tuple[str, str]] = []
    workers = result.get("workers", {})
    for key, run in workers.items():
        out.append((f"(a) {key} worker{'s' if key != '1' else ''}: calls/s; p50 / p99 ms", _lat(run)))
    for key, run in workers.items():
        c = run["cpu"]
        out.append(
            (
                f"(a) {key} worker{'s' if key != '1' else ''}: failed calls; machine CPU busy;"
                " cores of the server / PostgreSQL / clients",
                f"{run['failed']}; {c['machine_busy_share']:.0%}; {c['server_cores']} / {c['postgres_cores']}"
                f" / {c['client_cores']}",
            )
        )
    cpus = result.get("machine", {}).get("cpus") or 1
    for key, run in workers.items():
        c, rate = run["cpu"], run["calls_per_s"] or math.nan
        server_ms, postgres_ms = c["server_cores"] * 1000 / rate, c["postgres_cores"] * 1000 / rate
        out.append(
            (
                f"(a) {key} worker{'s' if key != '1' else ''}: CPU ms per call, server / PostgreSQL;"
                f" calls/s {cpus} cores would serve at that cost",
                f"{server_ms:.1f} / {postgres_ms:.1f}; {cpus * 1000 / (server_ms + postgres_ms):.0f}",
            )
        )
    if "1" in workers and "2" in workers and workers["1"]["calls_per_s"]:
        ratio = workers["2"]["calls_per_s"] / workers["1"]["calls_per_s"]
        out.append(("(a) ratio 2 workers / 1, calls/s", f"{ratio:.2f}x"))
        spread = workers["2"]["per_worker"]
        out.append(
            (
                "(a) 2 workers: connections per worker (opened 10 ms apart; all at once); CPU cores per worker",
                " / ".join(str(w["connections"]) for w in spread)
                + f" ({' / '.join(str(k) for k in workers['2'].get('burst_connections_per_worker') or [])})"
                + "; "
                + " / ".join(str(w["cpu_cores"]) for w in spread),
            )
        )
    replica = result.get("replica", {})
    for key, label in (("primary_only", "primary only"), ("with_replica", "primary + 1 streaming replica")):
        if key in replica:
            run = replica[key]
            out.append((f"(b) {label}, 1 worker: calls/s; p50 / p99 ms", _lat(run) + f"; failed {run['failed']}"))
    if "with_replica" in replica:
        r = replica["with_replica"]["routing"]
        out.append(
            ("(b) read statements on the replica / on the primary", f"{r['reads_replica']:g} / {r['reads_primary']:g}")
        )
    if "same_answers" in replica:
        s = replica["same_answers"]
        out.append(
            ("(b) same facts and episodes served, primary only and through the replica", f"{s['same']} / {s['asked']}")
        )
    for phase, label in (
        ("current", "replica current"),
        ("lagging", f"replica lagging {result.get('lag_ms', 100):g} ms"),
    ):
        t = result.get("tokens", {}).get(phase)
        if t is None:
            continue
        w, wo, r = t["with_token_ms"], t["without_token_ms"], t["routing"]
        out.append(
            (
                f"(c) {label}: context p50 / p99 ms with a token; without",
                f"{w['p50']:.1f} / {w['p99']:.1f}; {wo['p50']:.1f} / {wo['p99']:.1f}",
            )
        )
        out.append(
            (
                f"(c) {label}: extra for the token, p50 / p99 ms (median per pair)",
                f"{t['extra_p50_ms']:+.1f} / {t['extra_p99_ms']:+.1f} ({t['per_pair_extra_ms']['p50']:+.1f})",
            )
        )
        out.append(
            (
                f"(c) {label}: token calls served by the replica / fell back to the primary",
                f"{r['token_waits_replica']:g} / {r['token_waits_primary']:g}",
            )
        )
    return out


def markdown(result: dict[str, Any]) -> str:
    m = result["machine"]
    first: dict[str, Any] = next(iter(result.get("workers", {}).values()), {})
    lines = [
        f"# Scale-out, {result['started_at']}",
        "",
        f"`{result['command']}`: one subject of {result['n']:,} facts + {result['n']:,} events among 10 such"
        f" subjects, the {result['embedder']} embedder, budget {result['budget']}, distinct questions;"
        f" {first.get('clients', '?')} closed-loop clients on keep-alive connections,"
        f" {first.get('warmup_s', '?')} s warm-up then {first.get('seconds', '?')} s timed;"
        f" settings {result['settings']}. {m['cpus']} CPUs ({m['cpu_model'] or m['platform']}),"
        f" {m['memory_gb']} GiB; load average {result['loadavg_start'][0]} at the start,"
        f" {result.get('loadavg_end', ['?'])[0]} at the end; the clients run on the same machine.",
        "",
        "| figure | result |",
        "|---|---|",
        *(f"| {name} | {value} |" for name, value in rows(result)),
        "",
    ]
    if "replica" in result:
        lines += [
            f"(b): {ROUTING_NOTE} The standby replays the primary's log on the same {m['cpus']} cores,"
            " and it ran during both (b) loads.",
            "",
        ]
    return "\n".join(lines)


def write(result: dict[str, Any], out: Path, label: str) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"{HARNESS}-{datetime.now(UTC):%Y-%m-%d}{'-' + label if label else ''}"
    paths = {"json": stem.with_suffix(".json"), "md": stem.with_suffix(".md")}
    paths["json"].write_text(json.dumps(result, indent=1) + "\n")
    paths["md"].write_text(markdown(result))
    return paths


def parse_args(argv: list[str] | None = None) -> Options:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.scale_out", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--n", type=int, default=10_000, help="facts and events of the measured subject (10,000)")
    p.add_argument("--workers", default="1,2", help="worker counts of (a), comma-separated (1,2)")
    p.add_argument("--clients", type=int, default=16, help="closed-loop clients of (a) and (b) (16)")
    p.add_argument("--warmup", type=float, default=5.0, help="seconds of load before each timed window (5)")
    p.add_argument("--seconds", type=float, default=30.0, help="each timed window (30)")
    p.add_argument("--pairs", type=int, default=200, help="(c) timed pairs per phase (200)")
    p.add_argument("--pairs-warmup", type=int, default=10, help="(c) pairs before the timed ones (10)")
    p.add_argument("--lag-ms", type=float, default=100.0, help="(c) the standby's apply delay (100)")
    p.add_argument("--check", type=int, default=20, help="(b) questions asked of both servers (20)")
    p.add_argument("--skip-replica", action="store_true", help="(a) alone: no standby, no (b) or (c)")
    p.add_argument("--budget", type=int, default=900)
    p.add_argument(
        "--embedder",
        choices=["onnx", "onnx-fp32", "minilm", "hashing"],
        default=Settings().embed_provider.value,
        help="the server's (HAKI_EMBED_PROVIDER, default onnx); hashing: a fast stand-in for smoke runs",
    )
    p.add_argument("--database-url", default=None, help="a local PostgreSQL server instead of an embedded one")
    p.add_argument("--data-dir", type=Path, default=None, help="the embedded PostgreSQL's folder, kept (default: temp)")
    p.add_argument("--keep", action="store_true", help="with --database-url: keep the benchmark database")
    p.add_argument("--reuse", action="store_true", help="measure a kept database of the same N instead of seeding")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="a Settings field of every server")
    p.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--label", default="")
    a = p.parse_args(argv)
    settings = dict(BENCH_SETTINGS)
    for item in a.set:
        name, eq, value = item.partition("=")
        if name not in Settings.model_fields or not eq:
            p.error(f"--set {item!r}: expected NAME=VALUE with NAME a Settings field")
        settings[name] = value
    return Options(
        n=a.n,
        workers=[int(x) for x in a.workers.split(",")],
        clients=a.clients,
        warmup=a.warmup,
        seconds=a.seconds,
        pairs=a.pairs,
        pairs_warmup=a.pairs_warmup,
        lag_ms=a.lag_ms,
        check=a.check,
        skip_replica=a.skip_replica,
        budget=a.budget,
        embedder=a.embedder,
        database_url=a.database_url,
        data_dir=a.data_dir.resolve() if a.data_dir else None,
        keep=a.keep,
        reuse=a.reuse,
        settings=settings,
        cache_dir=a.cache_dir,
        out=a.out,
        label=a.label,
        argv=list(sys.argv[1:] if argv is None else argv),
    )


def main(argv: list[str] | None = None) -> int:
    o = parse_args(argv)
    result = run(o)
    paths = write(result, o.out, o.label)
    print(markdown(result))
    for path in paths.values():
        print(f"wrote {path}")
    runs = [*result.get("workers", {}).values(), *(v for v in result.get("replica", {}).values() if "failed" in v)]
    failed = sum(r["failed"] for r in runs)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
