"""A keep-alive HTTP/1.1 client that costs the benchmark almost nothing per call.

httpx adds 1.3-2.2 ms of client-side work to every call (measured against a trivial
uvicorn app answering a 5 KB JSON body: httpx 1.5-2.5 ms per call, this client
0.26 ms), and that time is the client's, not the server's. The benchmark's headline
HTTP figures use this client; it also reports the agent selection through httpx,
which is what most Python agents (the OpenAI SDK among them) call through.

It speaks just enough HTTP/1.1 for our server: one connection, POST with a JSON
body, responses with a Content-Length (Starlette sends one for every JSON answer).

`python -m benchmarks.lean_http [--calls 2000]` measures that client overhead:
both clients call a trivial uvicorn app on 127.0.0.1 answering a 5 KB JSON body,
in turns, and it prints each client's p50 / p95 ms per call (a few seconds).
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import time
from typing import Any
from urllib.parse import urlsplit

import orjson


class _Closed(Exception):
    """The server closed the connection before answering a byte."""


class LeanClient:
    """One keep-alive connection to `base_url`; `post_json` sends one request at a time."""

    def __init__(self, base_url: str, *, timeout: float = 300.0) -> None:
        parts = urlsplit(base_url)
        self._timeout = timeout
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or 80
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def post_json(self, path: str, body: Any) -> tuple[int, bytes]:
        """POST `body` as JSON; return the status and the response body.

        A kept connection the server has closed meanwhile (uvicorn closes idle ones after
        5 s) is replaced once, before any byte of the answer was read."""
        payload = orjson.dumps(body)
        if self._writer is not None:
            try:
                return await self._bounded(path, payload)
            except _Closed:
                await self.aclose()
        return await self._bounded(path, payload)

    async def _bounded(self, path: str, payload: bytes) -> tuple[int, bytes]:
        """One exchange within the timeout; any failure closes the connection (it may be out of step)."""
        try:
            return await asyncio.wait_for(self._exchange(path, payload), self._timeout)
        except BaseException:
            await self.aclose()
            raise

    async def _exchange(self, path: str, payload: bytes) -> tuple[int, bytes]:
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(self._host, self._port)
        assert self._reader is not None and self._writer is not None
        self._writer.write(
            f"POST {path} HTTP/1.1\r\nhost: {self._host}:{self._port}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(payload)}\r\n\r\n".encode()
            + payload
        )
        try:
            head = await self._reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            if getattr(exc, "partial", b""):
                raise
            raise _Closed from exc
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines if h)}
        if "content-length" not in headers:
            raise RuntimeError(f"response without content-length: {status_line} {headers}")
        data = await self._reader.readexactly(int(headers["content-length"]))
        if headers.get("connection", "").lower() == "close":
            await self.aclose()
        return int(status_line.split(" ", 2)[1]), data

    async def aclose(self) -> None:
        """Close the connection (the next call opens a new one)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
            self._reader = None


async def _overhead(calls: int) -> dict[str, list[float]]:
    import httpx
    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    answer = {"data": {"context": {"rendered": "x" * 5000}}}

    async def graphql(request: Any) -> JSONResponse:
        await request.body()
        return JSONResponse(answer)

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    app = Starlette(routes=[Route("/graphql", graphql, methods=["POST"])])
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    serving = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    url, body = f"http://127.0.0.1:{port}", {"query": "{ context }", "variables": {}}
    lean, hx = LeanClient(url), httpx.AsyncClient(base_url=url)
    times: dict[str, list[float]] = {"lean": [], "httpx": []}
    try:
        for i in range(calls + 50):  # the first 50 of each warm up
            for name in ("lean", "httpx") if i % 2 else ("httpx", "lean"):
                t = time.perf_counter()
                if name == "lean":
                    await lean.post_json("/graphql", body)
                else:
                    (await hx.post("/graphql", json=body)).read()
                if i >= 50:
                    times[name].append((time.perf_counter() - t) * 1000.0)
    finally:
        await lean.aclose()
        await hx.aclose()
        server.should_exit = True
        await serving
    return times


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.lean_http", description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=2000, help="timed calls per client")
    a = p.parse_args(argv)
    for name, ms in asyncio.run(_overhead(a.calls)).items():
        p95 = statistics.quantiles(ms, n=20)[-1]
        print(f"{name:>5}: p50 {statistics.median(ms):.3f} ms, p95 {p95:.3f} ms per call ({len(ms)} calls)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
