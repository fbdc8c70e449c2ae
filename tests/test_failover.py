"""The server survives the loss of its database's primary, for real: a three-node Patroni
cluster (deploy/patroni: etcd and PostgreSQL 18 + pgvector on loopback, synchronous mode) and a
`haki-context serve` subprocess on its multi-host URL, reading from the standbys.

- Writes go to the leader and reads to the standbys (/metrics `haki_reads_total`).
- kill -9 of the leader's postmaster under a steady load of writes: every call answers 200, or
  503 UNAVAILABLE with Retry-After (never INTERNAL, never 500), writes succeed again within
  30 s on the new leader without a restart of the server, and every acknowledged write is read
  back afterwards.
- The Python client (clients/python) records an agent's turns through a failover: its retries
  carry every turn through, no exception reaches the agent.
- A planned switchover (Patroni's REST API) likewise.
- The leader's node frozen (SIGSTOP of its Patroni and PostgreSQL: a machine that hangs or is cut
  off, its connections open and silent): writes succeed again on the promoted standby within
  60 s, calls refused meanwhile only as UNAVAILABLE, no acknowledged write lost. Still flaky, so
  it runs only with HAKI_TEST_FROZEN_LEADER=1.

Skipped, with the install command, where Patroni or etcd is missing (deploy/patroni/README.md).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from haki_context_client import HakiClient, HakiError
from prometheus_client.parser import text_string_to_metric_families

from haki_context.core.serving.consistency import TOKEN_HEADER, parse_token

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))  # deploy/ is a folder of the repository, not an installed package
from deploy.patroni.cluster import Cluster, ClusterError, Ports, find_tools  # noqa: E402

pytestmark = pytest.mark.slow

RECORD = "mutation($i: [EventInput!]!) { recordEvents(inputs: $i) { id } }"
CONTEXT = "query($s: String!, $q: String!) { context(subjectId: $s, query: $q, budget: 300) { traceId } }"
WRITES_BACK_WITHIN_S = 30.0
# A frozen leader is failed over once its leader key expires (`ttl`, 20 s here), and its connections
# are given up on a grace after the statement timeout (10 s): a longer bound.
FROZEN_WRITES_BACK_WITHIN_S = 60.0


@dataclass
class Server:
    """`haki-context serve` on 127.0.0.1, on the cluster."""

    url: str
    proc: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    try:
        find_tools()
    except ClusterError as exc:
        pytest.skip(f"Patroni or etcd is missing: {exc}")
    # Not under pytest's tmp_path, which pytest prunes; /tmp is reachable by the cluster's user.
    root = Path(tempfile.mkdtemp(prefix="haki-failover-"))
    made = Cluster(root, Ports.free())
    try:
        made.start(timeout_s=180.0, log=lambda line: None)
        yield made
    finally:
        made.stop(remove=True, log=lambda line: None)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def server(cluster: Cluster) -> Iterator[Server]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    env = {k: v for k, v in os.environ.items() if not k.startswith("HAKI_")}
    env |= {
        "HAKI_DATABASE_URL": cluster.database_url(),
        "HAKI_REPLICA_URLS": ",".join(cluster.replica_urls()),
        "HAKI_DATA_DIR": str(cluster.root / "server"),
        "HAKI_DEV_MODE": "1",
        "HAKI_EMBED_PROVIDER": "hashing",
        "HAKI_METRICS": "public",
        "HAKI_SCOPE_INDEX_INTERVAL_S": "0",
    }
    log_path = cluster.root / "server.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "haki_context.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
            cwd=REPO_ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    made = Server(url=f"http://127.0.0.1:{port}", proc=proc, log_path=log_path)
    try:
        wait_for_replicas(made, healthy=2)
        yield made
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_for_replicas(server: Server, healthy: int, timeout_s: float = 60.0) -> list[dict[str, Any]]:
    """/readyz once the server is ready and `healthy` replicas serve, and the others are not standbys."""
    deadline = time.monotonic() + timeout_s
    replicas: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        assert server.proc.poll() is None, f"the server exited:\n{server.log()[-3000:]}"
        try:
            answer = httpx.get(f"{server.url}/readyz", timeout=2.0)
            replicas = answer.json().get("replicas", []) if answer.status_code == 200 else []
        except (httpx.HTTPError, ValueError):
            replicas = []
        states = Counter(r["state"] for r in replicas)
        if states["healthy"] == healthy and states["not_standby"] == len(replicas) - healthy:
            return replicas
        time.sleep(0.2)
    raise AssertionError(f"replicas {replicas} after {timeout_s:g} s:\n{server.log()[-3000:]}")


def reads_by_target(server: Server) -> dict[str, float]:
    text = httpx.get(f"{server.url}/metrics", timeout=5.0).text
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "haki_reads_total":
                out[sample.labels["target"]] = float(sample.value)
    return out


# ---------------------------------------------------------------- a steady load of writes


@dataclass
class Call:
    started: float
    ended: float
    status: int | None  # None: no HTTP answer
    code: str | None  # extensions.code of the first error
    retry_after: str | None
    ids: list[str]


@dataclass
class WriteLoad:
    """`writers` clients recording one event per call until stopped."""

    url: str
    writers: int = 3
    calls: list[Call] = field(default_factory=list)
    token: int = 0  # the highest consistency token of the acknowledged writes
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        # A call stuck on a frozen node answers within two client waits (db/pool.py): its statement's
        # (the statement timeout, 10 s, plus 5 s), then its cancellation's.
        async with httpx.AsyncClient(base_url=self.url, timeout=40.0) as http:
            await asyncio.gather(*(self._writer(http, n) for n in range(self.writers)))

    async def _writer(self, http: httpx.AsyncClient, n: int) -> None:
        subject = f"writer-{n}-{time.monotonic_ns()}"
        for i in range(100_000):
            if self.stop.is_set():
                return
            event = {"subjectId": subject, "kind": "note", "payload": {"text": f"write {i}"}}
            started = time.monotonic()
            try:
                answer = await http.post("/graphql", json={"query": RECORD, "variables": {"i": [event]}})
                body = answer.json()
            except (httpx.HTTPError, ValueError):
                self.calls.append(Call(started, time.monotonic(), None, None, None, []))
                await asyncio.sleep(0.1)
                continue
            errors = body.get("errors") or []
            code = (errors[0].get("extensions") or {}).get("code") if errors else None
            ids = [e["id"] for e in body["data"]["recordEvents"]] if answer.status_code == 200 and not errors else []
            self.calls.append(
                Call(started, time.monotonic(), answer.status_code, code, answer.headers.get("retry-after"), ids)
            )
            if ids:
                self.token = max(self.token, parse_token(answer.headers.get(TOKEN_HEADER)) or 0)
            await asyncio.sleep(0.02 if ids else 0.1)

    @property
    def acknowledged(self) -> list[str]:
        return [i for call in self.calls for i in call.ids]

    def writes_back_after(self, fault_at: float, quiet_s: float = 3.0) -> float | None:
        """Seconds from the fault to the first acknowledged write begun after the first refusal
        that followed it, or None while there is none. A write in flight may still commit just
        after a kill: a fault that refuses nothing within `quiet_s` did not show, and the first
        write after it counts."""
        refused = [c.started for c in self.calls if c.started >= fault_at and not c.ids]
        if refused:
            since = min(refused)
        elif time.monotonic() - fault_at >= quiet_s:
            since = fault_at
        else:
            return None
        back = [c.ended for c in self.calls if c.ids and c.started >= since]
        return min(back) - fault_at if back else None


def token_text(position: int) -> str:
    return f"{position >> 32:X}/{position & 0xFFFFFFFF:X}"


async def missing_events(server: Server, ids: list[str], token: int) -> list[str]:
    """The ids among `ids` that `event(id:)` does not return, read with the writes' token (a
    replica serves only once it has replayed them), a refused read retried within 60 s."""
    absent: list[str] = []
    headers = {TOKEN_HEADER: token_text(token)} if token else {}
    deadline = time.monotonic() + 60.0
    async with httpx.AsyncClient(base_url=server.url, timeout=20.0, headers=headers) as http:
        for start in range(0, len(ids), 15):
            chunk = ids[start : start + 15]
            query = "{ " + " ".join(f'a{i}: event(id: "{x}") {{ id }}' for i, x in enumerate(chunk)) + " }"
            while True:
                body = (await http.post("/graphql", json={"query": query})).json()
                if not body.get("errors"):
                    break
                assert time.monotonic() < deadline, body["errors"]
                await asyncio.sleep(0.5)
            absent += [x for i, x in enumerate(chunk) if body["data"][f"a{i}"] is None]
    return absent


async def through_fault(
    server: Server,
    cluster: Cluster,
    fault: Callable[[], dict[str, Any]],
    beside: Agents | None = None,
    *,
    writes_back_within_s: float = WRITES_BACK_WITHIN_S,
    thaw: Callable[[], None] | None = None,
) -> tuple[WriteLoad, float | None, dict[str, Any]]:
    """A write load (and `beside`'s agents), `fault` 2 s into it, the load kept on until writes
    succeed again and 2 s more (`writes_back_within_s` at most); then `thaw` and the cluster
    healthy again."""
    load = WriteLoad(server.url)
    running = asyncio.create_task(load.run())
    agents = asyncio.create_task(beside.run()) if beside is not None else None
    await asyncio.sleep(2.0)
    fault_at = time.monotonic()
    detail = await asyncio.to_thread(fault)
    back: float | None = None
    while time.monotonic() - fault_at < writes_back_within_s:
        back = load.writes_back_after(fault_at)
        if back is not None:
            break
        await asyncio.sleep(0.1)
    await asyncio.sleep(2.0)
    load.stop.set()
    await running
    back = load.writes_back_after(fault_at)  # again, with every call's answer in
    if beside is not None and agents is not None:
        beside.stop.set()
        await agents
    if thaw is not None:
        thaw()
    # The old leader back as a standby before the next test (pg_rewind, then streaming).
    await asyncio.to_thread(cluster.wait_healthy, 120.0)
    return load, back, detail


def assert_no_call_failed_but_unavailable(load: WriteLoad, server: Server) -> None:
    answers = Counter((c.status, c.code) for c in load.calls)
    assert set(answers) <= {(200, None), (503, "UNAVAILABLE")}, answers
    assert all(c.retry_after for c in load.calls if c.status == 503), "a 503 without Retry-After"
    assert "internal error" not in server.log(), server.log()[-3000:]


# ---------------------------------------------------------------- the tests


async def test_writes_go_to_the_leader_and_reads_to_the_standbys(cluster: Cluster, server: Server) -> None:
    leader = cluster.leader()
    assert leader is not None
    replicas = {r["target"]: r["state"] for r in wait_for_replicas(server, healthy=2)}
    assert replicas[f"127.0.0.1:{leader.port}"] == "not_standby", replicas  # the leader's URL is left out
    before = reads_by_target(server)
    async with HakiClient(server.url) as haki:
        events = await haki.remember("failover-reads", [{"speaker": "user", "text": "I drink tea in Lisbon"}])
        for _ in range(6):
            packet = await haki.context("failover-reads", "what do I drink?")
            assert packet.trace_id
        assert await haki.event(events[0].id) is not None
    after = reads_by_target(server)
    on_standbys = sum(after.get(t, 0.0) - before.get(t, 0.0) for t, s in replicas.items() if s == "healthy")
    assert on_standbys > 0, (before, after)
    assert after.get(f"127.0.0.1:{leader.port}", 0.0) == before.get(f"127.0.0.1:{leader.port}", 0.0)


async def test_kill_9_of_the_leader_fails_no_call_but_unavailable_and_loses_no_write(
    cluster: Cluster, server: Server
) -> None:
    old = cluster.leader()
    assert old is not None
    load, back, detail = await through_fault(server, cluster, cluster.kill_leader_postmaster, None)
    assert back is not None and back <= WRITES_BACK_WITHIN_S, f"writes not back within {WRITES_BACK_WITHIN_S:g} s"
    assert_no_call_failed_but_unavailable(load, server)
    new = cluster.leader()
    assert new is not None and new.name != old.name, (detail, cluster.members())
    assert server.proc.poll() is None  # the same server process throughout
    acknowledged = load.acknowledged
    assert len(acknowledged) > 20
    assert await missing_events(server, acknowledged, load.token) == []


@dataclass
class Agents:
    """`count` agents on the Python client, each recording a turn (two messages) and asking for
    context in a loop; what reached them as an exception is in `failures`."""

    url: str
    count: int
    turns: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    token: int = 0  # the highest consistency token the clients held at the end
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        await asyncio.gather(*(self._agent(n) for n in range(self.count)))

    async def _agent(self, n: int) -> None:
        subject = f"agent-{n}-{time.monotonic_ns()}"
        async with HakiClient(self.url) as haki:  # its default retries, as an agent has them
            i = 0
            while not self.stop.is_set():
                i += 1
                turn = [{"speaker": "user", "text": f"question {i}"}, {"speaker": "agent", "text": f"answer {i}"}]
                try:
                    self.turns.extend(e.id for e in await haki.remember(subject, turn))
                    await haki.context(subject, f"question {i}?")
                except HakiError as exc:  # what the agent would see
                    self.failures.append(f"{type(exc).__name__} {exc.code}: {exc}")
                await asyncio.sleep(0.05)
            self.token = max(self.token, parse_token(haki.consistency_token) or 0)


async def test_the_python_client_records_turns_through_a_failover(cluster: Cluster, server: Server) -> None:
    agents = Agents(server.url, 3)
    load, back, _ = await through_fault(server, cluster, cluster.kill_leader_postmaster, agents)
    assert agents.failures == [], agents.failures
    assert back is not None and len(agents.turns) > 10
    token = max(load.token, agents.token)
    assert await missing_events(server, agents.turns + load.acknowledged, token) == []


async def test_a_switchover_fails_no_call_but_unavailable_and_loses_no_write(cluster: Cluster, server: Server) -> None:
    old = cluster.leader()
    assert old is not None
    agents = Agents(server.url, 2)
    load, back, detail = await through_fault(server, cluster, cluster.switchover, agents)
    assert back is not None and back <= WRITES_BACK_WITHIN_S, f"writes not back within {WRITES_BACK_WITHIN_S:g} s"
    assert_no_call_failed_but_unavailable(load, server)
    assert agents.failures == [], agents.failures
    new = cluster.leader()
    assert new is not None and new.name == detail["candidate"] != old.name, (detail, cluster.members())
    token = max(load.token, agents.token)
    assert await missing_events(server, load.acknowledged + agents.turns, token) == []


@pytest.mark.skipif(
    not os.environ.get("HAKI_TEST_FROZEN_LEADER"),
    reason="the frozen-leader failover is still flaky (writes not back within 60 s in 1 of 4 CI runs of "
    "the module; cause under investigation): set HAKI_TEST_FROZEN_LEADER=1 to run it",
)
async def test_a_frozen_leader_is_given_up_on_and_writes_go_on_on_the_new_one(cluster: Cluster, server: Server) -> None:
    # Patroni promotes after the leader key's ttl (20 s here); the server stops waiting on the frozen
    # node's connections a grace after its statement timeout and connects past it, each host within
    # a timeout of its own.
    old = cluster.leader()
    assert old is not None
    try:
        load, back, detail = await through_fault(
            server,
            cluster,
            cluster.freeze_leader,
            writes_back_within_s=FROZEN_WRITES_BACK_WITHIN_S,
            thaw=cluster.thaw,
        )
    finally:
        cluster.thaw()
    assert back is not None and back <= FROZEN_WRITES_BACK_WITHIN_S, (
        f"writes not back within {FROZEN_WRITES_BACK_WITHIN_S:g} s"
    )
    assert_no_call_failed_but_unavailable(load, server)
    assert server.proc.poll() is None
    new = cluster.leader()
    assert new is not None and new.name != old.name, (detail, cluster.members())
    assert await missing_events(server, load.acknowledged, load.token) == []
