"""`haki-context serve --workers N`: N server processes on one port and one embedded database,
owned by the parent process, which replaces a worker that dies and stops them all (and then the
database) on SIGTERM or Ctrl-C; live traces reach a subscriber whichever worker served the call;
a worker count past the database's connections is refused before any worker starts."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
from websockets.sync.client import ClientConnection, connect

from haki_context.db import embedded
from haki_context.settings import Settings

CLI = str(Path(sys.executable).parent / "haki-context")
GRACE_S = 2.0
# Beyond the grace period: each worker's pool closing, the database's fast stop, the interpreters' exits.
SLACK_S = 6.0
WAIT_S = 30.0  # a guard against a hang, not a timed assertion
REPLACED_WITHIN_S = 15.0
CALLS = 20
MOST_CALLS = 100  # fresh connections tried until both workers have served one
ERROR_PREFIX = "haki-context: error:"
TOKEN = re.compile(r"[0-9A-F]{1,8}/[0-9A-F]{1,8}")
RECORD = (
    'mutation($s: String!) { recordEvent(input: {subjectId: $s, kind: "note",'
    ' payload: {text: "served by a worker"}}) { id } }'
)
CONTEXT = "query($s: String!, $q: String!) { context(subjectId: $s, query: $q) { traceId } }"
TRACE_ADDED = "subscription($s: String) { traceAdded(subjectId: $s) { id subjectId } }"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _env(data_dir: Path, **settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HAKI_")}
    env.update({"HAKI_DATA_DIR": str(data_dir), "HAKI_EMBED_PROVIDER": "hashing", **settings})
    return env


def _session_processes(sid: int) -> list[psutil.Process]:
    """The live processes of session `sid` (each server runs in a session of its own)."""
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error, ProcessLookupError):
            if os.getsid(process.pid) == sid and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
    return found


def _assert_nothing_left(sid: int, data_dir: Path) -> None:
    deadline = time.monotonic() + 5.0
    while _session_processes(sid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _session_processes(sid), [p.cmdline() for p in _session_processes(sid)]
    assert not embedded.is_running(data_dir)
    assert not (data_dir / embedded.OWNER_FILE).exists()


def _clean_up(sid: int | None, data_dir: Path) -> None:
    """After a failed test: the processes this test started, by pid, and the database they left."""
    if sid is not None:
        for process in _session_processes(sid):
            with contextlib.suppress(psutil.Error):
                process.kill()
    if embedded.is_running(data_dir):
        embedded.stop(embedded.pgdata_dir(data_dir), "embedded_postgres" if os.geteuid() == 0 else None)
    shutil.rmtree(data_dir, ignore_errors=True)


@dataclass
class Answer:
    """One call's response, and the worker process whose connection served it."""

    status: int
    body: Any
    headers: dict[str, str]  # names in lower case
    worker: int


class Served:
    """`haki-context serve --workers 2` on a fresh data directory and a free port, in a session
    of its own (a Ctrl-C reaches that session's process group), its log in a file."""

    def __init__(self, **settings: str) -> None:
        # Not under pytest's tmp_path, as conftest's pg_server: pytest prunes old run folders.
        self.data_dir = Path(tempfile.mkdtemp(prefix="haki-workers-"))
        self.port = _free_port()
        fd, log_name = tempfile.mkstemp(prefix="haki-workers-", suffix=".log")
        self.log_path = Path(log_name)
        with os.fdopen(fd, "w") as log:
            self.proc = subprocess.Popen(
                [CLI, "serve", "--host", "127.0.0.1", "--port", str(self.port), "--workers", "2"],
                env=_env(self.data_dir, HAKI_SHUTDOWN_GRACE_S=str(GRACE_S), **settings),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def log(self) -> str:
        return self.log_path.read_text()

    def workers(self) -> list[psutil.Process]:
        """The parent's live worker processes (not multiprocessing's resource tracker)."""
        found = []
        for child in psutil.Process(self.proc.pid).children():
            with contextlib.suppress(psutil.Error):
                if child.status() != psutil.STATUS_ZOMBIE and "spawn_main" in " ".join(child.cmdline()):
                    found.append(child)
        return found

    def call(self, method: str, path: str, payload: dict[str, Any] | None = None) -> Answer:
        """One request on a new connection (the kernel hands it to one worker); the worker that
        holds the connection's server end, found while the connection is still open."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=WAIT_S)
        try:
            body = json.dumps(payload).encode() if payload is not None else None
            conn.request(method, path, body=body, headers={"content-type": "application/json"})
            response = conn.getresponse()
            text = response.read()
            assert conn.sock is not None
            workers = self.workers()
            client = conn.sock.getsockname()[:2]
            owners = [w.pid for w in workers if _holds(w, self.port, client)]
            assert len(owners) == 1, (owners, [w.pid for w in workers])
            return Answer(
                response.status, json.loads(text), {k.lower(): v for k, v in response.getheaders()}, owners[0]
            )
        finally:
            conn.close()

    def graphql(self, query: str, **variables: str) -> Answer:
        answer = self.call("POST", "/graphql", {"query": query, "variables": variables})
        assert answer.status == 200 and not answer.body.get("errors"), answer.body
        return answer

    def serving_workers(self) -> set[int]:
        """The workers seen answering /readyz on fresh connections, asked until each has (a worker
        started last may still be loading)."""
        wanted = {w.pid for w in self.workers()}
        seen: set[int] = set()
        deadline = time.monotonic() + WAIT_S
        while seen != wanted and time.monotonic() < deadline:
            answer = self.call("GET", "/readyz")
            if answer.status == 200:
                seen.add(answer.worker)
            time.sleep(0.01)
        return seen

    def stop(self, sig: signal.Signals = signal.SIGTERM, *, group: bool = False) -> tuple[float, int]:
        """Send `sig` to the parent (or, as Ctrl-C does, to the whole process group); (seconds to exit, status)."""
        started = time.monotonic()
        if group:
            os.killpg(self.proc.pid, sig)
        else:
            self.proc.send_signal(sig)
        code = self.proc.wait(timeout=60)
        return time.monotonic() - started, code

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.stop()
        _clean_up(self.proc.pid, self.data_dir)
        self.log_path.unlink(missing_ok=True)


def _holds(worker: psutil.Process, port: int, client: tuple[str, int]) -> bool:
    """True when `worker` holds the server end of the TCP connection from `client` to `port`."""
    try:
        connections = worker.net_connections(kind="tcp")
    except psutil.Error:
        return False
    return any(c.laddr and c.raddr and c.laddr[1] == port and tuple(c.raddr)[:2] == client for c in connections)


def _serving(served: Served) -> Served:
    """`served`, once ready with both workers serving."""
    deadline = time.monotonic() + 90.0
    while time.monotonic() < deadline:
        assert served.proc.poll() is None, served.log
        with contextlib.suppress(OSError, http.client.HTTPException, ValueError):
            if served.call("GET", "/readyz").status == 200:
                break
        time.sleep(0.2)
    else:
        raise AssertionError(f"the server did not become ready:\n{served.log}")
    assert len(served.workers()) == 2, served.log
    assert served.serving_workers() == {w.pid for w in served.workers()}, served.log
    return served


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    server = Served()
    try:
        yield _serving(server)
    finally:
        server.close()


def _worker_pids(served: Served) -> set[int]:
    return {w.pid for w in served.workers()}


def test_two_workers_serve_one_port_on_one_embedded_database_owned_by_the_parent(served: Served) -> None:
    ready = served.call("GET", "/readyz")
    assert ready.status == 200 and ready.body["status"] == "ready"
    workers = _worker_pids(served)
    assert len(workers) == 2 and served.proc.pid not in workers
    # The parent started the embedded PostgreSQL and owns it; the workers attached to it.
    assert embedded.is_running(served.data_dir)
    assert embedded.owner_pid(served.data_dir) == served.proc.pid
    assert served.log.count("attaching to the embedded PostgreSQL") >= 2, served.log

    subject = f"workers-{uuid.uuid4().hex[:8]}"
    written = served.graphql(RECORD, s=subject)
    assert written.body["data"]["recordEvent"]["id"]
    token = written.headers.get("haki-consistency-token")
    assert token is not None and TOKEN.fullmatch(token), written.headers
    assert written.body["extensions"]["consistencyToken"] == token
    answered = served.graphql(CONTEXT, s=subject, q="what was noted")
    assert answered.body["data"]["context"]["traceId"]
    assert {written.worker, answered.worker} <= workers


def test_a_killed_worker_is_replaced(served: Served) -> None:
    before = _worker_pids(served)
    assert len(before) == 2
    killed = min(before)
    os.kill(killed, signal.SIGKILL)
    subject = f"killed-{uuid.uuid4().hex[:8]}"
    assert served.graphql(CONTEXT, s=subject, q="still answered").body["data"]["context"]["traceId"]
    deadline = time.monotonic() + REPLACED_WITHIN_S
    while (_worker_pids(served) - before == set() or len(_worker_pids(served)) != 2) and time.monotonic() < deadline:
        time.sleep(0.1)
    after = _worker_pids(served)
    assert len(after) == 2 and killed not in after, served.log
    (replacement,) = after - before
    assert not embedded.pid_alive(killed)
    assert f"worker {killed} exited" in served.log, served.log
    # Calls keep being answered, and the replacement serves its share once it has started.
    deadline = time.monotonic() + WAIT_S
    workers_seen: set[int] = set()
    while replacement not in workers_seen and time.monotonic() < deadline:
        workers_seen.add(served.graphql(CONTEXT, s=subject, q="answered").worker)
    assert replacement in workers_seen, served.log
    assert embedded.owner_pid(served.data_dir) == served.proc.pid  # the database was never touched


def _receive(ws: ClientConnection, timeout: float = WAIT_S) -> dict[str, Any]:
    message: dict[str, Any] = json.loads(ws.recv(timeout=timeout))
    return message


def test_a_live_subscriber_gets_the_traces_of_calls_served_by_either_worker(served: Served) -> None:
    subject = f"live-{uuid.uuid4().hex[:8]}"
    with connect(f"ws://127.0.0.1:{served.port}/graphql", subprotocols=["graphql-transport-ws"]) as ws:  # type: ignore[list-item]
        ws.send(json.dumps({"type": "connection_init", "payload": {}}))
        assert _receive(ws)["type"] == "connection_ack"
        ws.send(
            json.dumps({"id": "1", "type": "subscribe", "payload": {"query": TRACE_ADDED, "variables": {"s": subject}}})
        )
        # The subscriber's worker LISTENs once it holds the subscription: a call's trace arriving
        # says it does (calls before that are not announced to it).
        deadline = time.monotonic() + WAIT_S
        while True:
            assert time.monotonic() < deadline, served.log
            served.graphql(CONTEXT, s=subject, q="probe")
            with contextlib.suppress(TimeoutError):
                if _receive(ws, timeout=0.5)["type"] == "next":
                    break
        # Each call on a new connection, handed by the kernel to whichever worker accepts it
        # first. Which worker held each connection's server end is read from the workers' own
        # sockets, so the count of workers that served is known, not assumed; calls go on (past
        # CALLS, up to MOST_CALLS) until both have served, and the test fails if one never does.
        expected: dict[str, int] = {}
        for i in range(MOST_CALLS):
            answer = served.graphql(CONTEXT, s=subject, q=f"call {i}")
            expected[answer.body["data"]["context"]["traceId"]] = answer.worker
            if i + 1 >= CALLS and len(set(expected.values())) == 2:
                break
        assert set(expected.values()) == _worker_pids(served), expected
        received: set[str] = set()
        deadline = time.monotonic() + WAIT_S
        while not expected.keys() <= received and time.monotonic() < deadline:
            message = _receive(ws)
            assert message["type"] == "next" and not message["payload"].get("errors"), message
            trace = message["payload"]["data"]["traceAdded"]
            assert trace["subjectId"] == subject
            received.add(trace["id"])
        missing = {trace_id: worker for trace_id, worker in expected.items() if trace_id not in received}
        assert not missing, f"traces never announced (trace id: the worker that served it): {missing}"


def _scrape(served: Served) -> tuple[str, int]:
    """GET /metrics on a new connection: the text, and the worker that answered it."""
    conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=WAIT_S)
    try:
        conn.request("GET", "/metrics")
        response = conn.getresponse()
        text = response.read().decode()
        assert response.status == 200, text
        assert conn.sock is not None
        client = conn.sock.getsockname()[:2]
        (owner,) = [w.pid for w in served.workers() if _holds(w, served.port, client)]
        return text, owner
    finally:
        conn.close()


def _recorded(text: str) -> float:
    line = next(
        line
        for line in text.splitlines()
        if line.startswith('haki_graphql_requests_total{code="OK",operation="recordEvent"}')
    )
    return float(line.rsplit(" ", 1)[1])


def test_every_worker_answers_metrics_with_the_counts_of_all_of_them(served: Served) -> None:
    subject = f"metrics-{uuid.uuid4().hex[:8]}"
    before, _ = _scrape(served)
    served_by: list[int] = []
    for _ in range(MOST_CALLS):
        served_by.append(served.graphql(RECORD, s=subject).worker)
        if len(served_by) >= 10 and len(set(served_by)) == 2:
            break
    assert set(served_by) == _worker_pids(served)  # both workers recorded some
    scraped_by: set[int] = set()
    for _ in range(MOST_CALLS):
        text, worker = _scrape(served)
        # Whichever worker answers, it counts every worker's calls.
        assert _recorded(text) == _recorded(before) + len(served_by)
        scraped_by.add(worker)
        if scraped_by == _worker_pids(served):
            break
    assert scraped_by == _worker_pids(served)


@pytest.mark.parametrize(
    ("sig", "group"),
    [(signal.SIGTERM, False), (signal.SIGINT, True)],
    ids=["sigterm-to-the-parent", "ctrl-c-to-the-process-group"],
)
def test_a_stop_ends_every_worker_then_the_embedded_database(sig: signal.Signals, group: bool) -> None:
    served = Served()
    try:
        _serving(served)
        workers = _worker_pids(served)
        postmaster = embedded.postmaster_pid(embedded.pgdata_dir(served.data_dir))
        assert postmaster is not None and embedded.pid_alive(postmaster)
        took, code = served.stop(sig, group=group)
        log = served.log
        assert code == 0, log
        assert took < GRACE_S + SLACK_S, (took, log)
        assert not any(embedded.pid_alive(pid) for pid in workers), log
        assert not embedded.pid_alive(postmaster), log
        _assert_nothing_left(served.proc.pid, served.data_dir)
        assert "Traceback" not in log, log
        assert log.splitlines()[-1].endswith(": embedded PostgreSQL stopped"), log
    finally:
        served.close()


def _run_refused(data_dir: Path, *args: str, **settings: str) -> tuple[subprocess.CompletedProcess[str], int]:
    proc = subprocess.Popen(
        [CLI, "serve", "--host", "127.0.0.1", "--port", str(_free_port()), *args],
        env=_env(data_dir, **settings),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), proc.pid


def test_workers_past_the_connections_the_database_allows_are_refused_before_any_starts() -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="haki-workers-"))
    sid = None
    try:
        done, sid = _run_refused(data_dir, HAKI_WORKERS="8", HAKI_POOL_MAX_SIZE="20")
        assert done.returncode == 1, done.stderr
        errors = [line for line in done.stderr.splitlines() if line.startswith(ERROR_PREFIX)]
        assert len(errors) == 1, done.stderr
        assert done.stderr.splitlines()[-1] == errors[0]
        assert "HAKI_WORKERS" in errors[0] and "8 worker(s)" in errors[0], errors[0]
        assert "Traceback" not in done.stderr and "worker processes" not in done.stderr, done.stderr
        _assert_nothing_left(sid, data_dir)
    finally:
        _clean_up(sid, data_dir)


@pytest.mark.parametrize(
    ("args", "settings", "named"),
    [(("--workers", "0"), {}, "--workers"), ((), {"HAKI_WORKERS": "0"}, "HAKI_WORKERS")],
    ids=["flag", "variable"],
)
def test_zero_workers_is_refused_as_a_bad_setting(args: tuple[str, ...], settings: dict[str, str], named: str) -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="haki-workers-"))
    sid = None
    try:
        done, sid = _run_refused(data_dir, *args, **settings)
        assert done.returncode == 1, done.stderr
        (line,) = done.stderr.splitlines()
        assert line.startswith(ERROR_PREFIX) and named in line, line
        assert not embedded.pgdata_dir(data_dir).exists()  # refused before the database was touched
        _assert_nothing_left(sid, data_dir)
    finally:
        _clean_up(sid, data_dir)


def test_auto_workers_is_one_per_core_this_process_may_run_on() -> None:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    for given in ("auto", " AUTO "):
        as_written: dict[str, Any] = {"workers": given}  # what HAKI_WORKERS or --workers hands over
        assert Settings(**as_written).workers == cores
    assert Settings(workers=3).workers == 3
