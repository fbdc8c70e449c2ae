"""What large bodies cost the server: its memory (RSS) before, at peak and after concurrent
oversize POSTs, first without a key (answered from the headers, body unread), then with one
(read up to HAKI_MAX_BODY_BYTES, then refused as PAYLOAD_TOO_LARGE).

Bounded and loopback only: one `haki-context serve` on 127.0.0.1 (embedded database in a
temporary directory, hashing embedder, HAKI_DEV_MODE=0), a fixed number of requests, a
timeout on each. Run:

    .venv/bin/python -m benchmarks.body_limits [--clients 8] [--mib 60]

Figures are in docs/operations.md, "Limits".
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil

from haki_context.settings import Settings

CLI = str(Path(sys.executable).with_name("haki-context"))
CHUNK = 1024 * 1024
MIB = 1024 * 1024
REQUEST_TIMEOUT_S = 120.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_env(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HAKI_")}
    env.update({"HAKI_DATA_DIR": str(data_dir), "HAKI_EMBED_PROVIDER": "hashing", "HAKI_DEV_MODE": "0"})
    return env


def wait_ready(port: int, proc: subprocess.Popen[bytes], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("the server exited before it was ready")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError("the server did not become ready")


class PeakRss:
    """Samples a process's RSS in a thread; `peak` is the largest seen."""

    def __init__(self, pid: int) -> None:
        self._process = psutil.Process(pid)
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def rss(self) -> int:
        return int(self._process.memory_info().rss)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.rss())
            time.sleep(0.02)

    def __enter__(self) -> PeakRss:
        self.peak = self.rss()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@dataclass
class Outcome:
    status: int | None
    sent: int


async def chunked_post(port: int, size: int, authorization: str | None) -> Outcome:
    """A POST /graphql whose body is `size` bytes sent chunked (no declared length), as a
    client streaming an upload does; the answer is read while the body is still going out."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = (
        "POST /graphql HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n" + (f"Authorization: {authorization}\r\n" if authorization else "") + "\r\n"
    )
    sent = 0
    chunk = b'{"query": "{ __typename }", "pad": "' + b"x" * (CHUNK - 38) + b'"}'

    async def send() -> None:
        nonlocal sent
        writer.write(head.encode())
        while sent < size:
            writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            await writer.drain()
            sent += len(chunk)
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    sending = asyncio.create_task(send())
    status: int | None = None
    try:
        line = await asyncio.wait_for(reader.readline(), REQUEST_TIMEOUT_S)
        if line.startswith(b"HTTP/1.1 "):
            status = int(line.split()[1])
    except (TimeoutError, ConnectionError):
        pass
    finally:
        sending.cancel()
        await asyncio.gather(sending, return_exceptions=True)
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    return Outcome(status, sent)


async def burst(port: int, clients: int, size: int, authorization: str | None) -> list[Outcome]:
    return list(await asyncio.gather(*(chunked_post(port, size, authorization) for _ in range(clients))))


def report(label: str, meter: PeakRss, before: int, outcomes: list[Outcome], seconds: float) -> None:
    after = meter.rss()
    statuses = sorted({o.status for o in outcomes}, key=str)
    sent = sum(o.sent for o in outcomes) / MIB
    print(
        f"{label}: statuses {statuses}, client sent {sent:.0f} MiB in {seconds:.1f} s; server RSS "
        f"before {before / MIB:.0f} MiB, peak {meter.peak / MIB:.0f} MiB (+{(meter.peak - before) / MIB:.0f}), "
        f"after {after / MIB:.0f} MiB (+{(after - before) / MIB:.0f})"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--mib", type=int, default=60, help="size of each unauthenticated body")
    args = parser.parse_args()
    data_dir = Path(tempfile.mkdtemp(prefix="haki-body-limits-"))
    port = free_port()
    env = server_env(data_dir)
    log = (data_dir / "server.log").open("wb")
    proc = subprocess.Popen([CLI, "serve", "--host", "127.0.0.1", "--port", str(port)], env=env, stdout=log, stderr=log)
    try:
        wait_ready(port, proc)
        created = subprocess.run(
            [CLI, "keys", "create", "--project", "bench"], env=env, capture_output=True, text=True, check=True
        )
        key = created.stdout.strip().splitlines()[-1]
        limit = Settings().max_body_bytes  # the default, which this server runs with
        for label, size, authorization in (
            (f"{args.clients} unauthenticated chunked POSTs of {args.mib} MiB", args.mib * MIB, None),
            (f"{args.clients} authenticated chunked POSTs over the limit", limit + 4 * MIB, f"Bearer {key}"),
        ):
            before = psutil.Process(proc.pid).memory_info().rss
            started = time.monotonic()
            with PeakRss(proc.pid) as meter:
                outcomes = asyncio.run(burst(port, args.clients, size, authorization))
                time.sleep(1.0)  # let the server finish its answers before the last sample
            report(label, meter, before, outcomes, time.monotonic() - started)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        shutil.rmtree(data_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
