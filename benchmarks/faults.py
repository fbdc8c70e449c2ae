"""Recovery from a crash of the embedded PostgreSQL under load, and the stop that follows.

    python -m benchmarks.faults [--kills 3] [--workers 4] [--settle 3]

Starts `haki-context serve` on a fresh data directory (hashing embedder, loopback only),
runs writes (`recordEvent`) and `context` calls in a loop from a few clients, kills the
postmaster with SIGKILL, and times how long until a write and a `context` call both succeed
again. Once every kill is done, every write acknowledged (before, during or after the
outages) is read back, the server is stopped with SIGTERM, and the stop's duration and the
embedded server's state are reported. Bounded: at most `--kills` outages, each waited on for
at most `--max-outage` seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

from haki_context.db import embedded

CLI = str(Path(sys.executable).parent / "haki-context")
RECORD = 'mutation($s: String!, $t: String!) { recordEvent(input: {subjectId: $s, kind: "note", payload: {text: $t}}) { id } }'
CONTEXT = 'query($s: String!) { context(subjectId: $s, query: "what was noted", budget: 300) { traceId } }'
READ = "query($id: ID!) { event(id: $id) { id } }"


@dataclass
class FaultRun:
    """What one run measured."""

    recoveries_s: list[float] = field(default_factory=list)
    acknowledged_writes: int = 0
    lost_writes: int = 0
    unavailable_answers: int = 0
    other_errors: int = 0
    stop_s: float = 0.0
    stop_exit_code: int | None = None
    database_stopped: bool = False
    log: str = ""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_server(data_dir: Path, port: int, **settings: str) -> subprocess.Popen[str]:
    """`haki-context serve` on `data_dir`, embedded database, hashing embedder, loopback."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HAKI_")}
    env.update({"HAKI_DATA_DIR": str(data_dir), "HAKI_EMBED_PROVIDER": "hashing", **settings})
    return subprocess.Popen(
        [CLI, "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_ready(port: int, proc: subprocess.Popen[str], timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited: {proc.stdout.read() if proc.stdout else ''}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError("the server did not become ready")


def kill_postmaster(data_dir: Path) -> int:
    pid = embedded.postmaster_pid(embedded.pgdata_dir(data_dir))
    assert pid is not None, "no postmaster.pid"
    os.kill(pid, signal.SIGKILL)
    return pid


def stop_server(proc: subprocess.Popen[str], sig: int = signal.SIGTERM, timeout: float = 60.0) -> tuple[float, str]:
    """Send `sig`, wait for the exit; (seconds it took, the server's output)."""
    started = time.monotonic()
    proc.send_signal(sig)
    output, _ = proc.communicate(timeout=timeout)
    return time.monotonic() - started, output


async def _load(
    port: int,
    worker: int,
    stop: asyncio.Event,
    *,
    run: FaultRun,
    acked: list[str],
    last_ok: list[float],
    last_fail: list[float],
) -> None:
    url = f"http://127.0.0.1:{port}/graphql"
    subject = f"faults-{worker}"
    n = 0
    async with httpx.AsyncClient(timeout=10) as client:
        while not stop.is_set():
            n += 1
            ok = True
            for query, variables in ((RECORD, {"s": subject, "t": f"note {n}"}), (CONTEXT, {"s": subject})):
                try:
                    response = await client.post(url, json={"query": query, "variables": variables})
                    body = response.json()
                except (httpx.HTTPError, ValueError):
                    run.other_errors += 1
                    ok = False
                    continue
                if body.get("errors"):
                    ok = False
                    if body["errors"][0].get("extensions", {}).get("code") == "UNAVAILABLE":
                        run.unavailable_answers += 1
                    else:
                        run.other_errors += 1
                elif query is RECORD:
                    acked.append(body["data"]["recordEvent"]["id"])
            if ok:
                last_ok[worker] = time.monotonic()
            else:
                last_fail[0] = time.monotonic()
                await asyncio.sleep(0.05)


async def _measure(
    port: int, data_dir: Path, *, kills: int, workers: int, settle: float, max_outage: float
) -> FaultRun:
    run = FaultRun()
    acked: list[str] = []
    last_ok = [0.0] * workers
    last_fail = [0.0]
    stop = asyncio.Event()
    tasks = [
        asyncio.create_task(_load(port, w, stop, run=run, acked=acked, last_ok=last_ok, last_fail=last_fail))
        for w in range(workers)
    ]
    try:
        await asyncio.sleep(settle)
        for _ in range(kills):
            await asyncio.to_thread(kill_postmaster, data_dir)
            killed = time.monotonic()
            # Recovered: every worker has completed a write and a context call since the last
            # failure after the kill. Sessions already open may answer for a moment after the
            # kill, so the outage counts as begun at its first failure (or after a few seconds).
            while min(last_ok) <= max(killed, last_fail[0]) or (
                last_fail[0] <= killed and time.monotonic() - killed < 3.0
            ):
                if time.monotonic() - killed > max_outage:
                    raise RuntimeError(f"no recovery within {max_outage} s")
                await asyncio.sleep(0.02)
            run.recoveries_s.append(round(min(last_ok) - killed, 3))
            await asyncio.sleep(settle)
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
    run.acknowledged_writes = len(acked)
    async with httpx.AsyncClient(timeout=10) as client:
        sem = asyncio.Semaphore(8)

        async def present(event_id: str) -> bool:
            async with sem:
                response = await client.post(
                    f"http://127.0.0.1:{port}/graphql", json={"query": READ, "variables": {"id": event_id}}
                )
                return bool((response.json().get("data") or {}).get("event"))

        found = await asyncio.gather(*(present(i) for i in acked))
    run.lost_writes = found.count(False)
    return run


def measure(
    kills: int = 1, workers: int = 4, settle: float = 2.0, max_outage: float = 30.0, **settings: str
) -> FaultRun:
    """One run on a fresh data directory, removed afterwards."""
    data_dir = Path(tempfile.mkdtemp(prefix="haki-faults-"))
    port = free_port()
    proc = start_server(data_dir, port, **settings)
    try:
        wait_ready(port, proc)
        run = asyncio.run(_measure(port, data_dir, kills=kills, workers=workers, settle=settle, max_outage=max_outage))
        run.stop_s, run.log = stop_server(proc)
        run.stop_s = round(run.stop_s, 3)
        run.stop_exit_code = proc.returncode
        run.database_stopped = not embedded.is_running(data_dir)
        return run
    except BaseException:
        if proc.poll() is None:
            proc.kill()
        output, _ = proc.communicate()
        print(output[-6000:], file=sys.stderr)  # the server's own account of the failure
        raise
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if embedded.is_running(data_dir):  # a failed run: the server left its database running
            embedded.stop(embedded.pgdata_dir(data_dir), "embedded_postgres" if os.geteuid() == 0 else None)
        shutil.rmtree(data_dir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--kills", type=int, default=3, help="postmaster kills, one after the other (at most 20)")
    parser.add_argument("--workers", type=int, default=4, help="clients writing and asking at once (at most 32)")
    parser.add_argument("--settle", type=float, default=3.0, help="seconds of load before and after each kill")
    parser.add_argument("--max-outage", type=float, default=30.0, help="give up when an outage lasts longer")
    args = parser.parse_args()
    run = measure(min(args.kills, 20), min(args.workers, 32), args.settle, args.max_outage)
    summary = asdict(run)
    log = summary.pop("log")
    print("\n".join(line for line in log.splitlines() if "supervisor" in line or "stopping" in line))
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
