"""What the headless-browser tests share: a live server, Debian's Chromium with the network closed, a tab.

`serve` runs a real `haki-context serve` (its own process, its own database in the test
PostgreSQL) on a free loopback port. `browser` starts Debian's `chromium` headless, driven through
the Chrome DevTools Protocol over a websocket (no Playwright, no browser download); it can reach
loopback only: every host name resolves to nothing and every other address goes to a dead proxy.
`Page` is one tab of it, recording what the page asked the network for and what went wrong.

`require_chromium` holds the rule for a machine without chromium: in CI (env CI set) the tests
fail; locally they are skipped.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect

CLI = str(Path(sys.executable).with_name("haki-context"))
LOOPBACK_HOSTS = {"127.0.0.1"}
# Schemes that never touch the network.
LOCAL_SCHEMES = {"data", "blob", "about", "chrome-error", "devtools"}


# ---------------------------------------------------------------- chromium


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


def require_chromium(tests: str) -> str:
    """Debian's chromium; without it `tests` fail in CI (they must run there) and skip elsewhere."""
    path = find_chromium()
    if path is None:
        reason = "Debian's chromium is not installed (apt-get install chromium)"
        if os.environ.get("CI"):
            pytest.fail(f"{reason}; {tests} must run in CI", pytrace=False)
        pytest.skip(reason)
    return path


# ---------------------------------------------------------------- the server


def haki_env(**settings: str) -> dict[str, str]:
    """This process's environment without its HAKI_ settings, plus `settings`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HAKI_")}
    env.update(settings)
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def fresh_database(pg_uri: str) -> str:
    """A new, empty database in the test server: this server's writes touch no other test's data."""
    name = f"haki_browser_{uuid.uuid4().hex[:12]}"
    conn = await asyncpg.connect(pg_uri)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    parts = urlsplit(pg_uri)
    return urlunsplit(parts._replace(path=f"/{name}"))


async def drop_database(pg_uri: str, dsn: str) -> None:
    conn = await asyncpg.connect(pg_uri)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{urlsplit(dsn).path.lstrip("/")}" WITH (FORCE)')
    finally:
        await conn.close()


@dataclass(frozen=True)
class Served:
    """A running server: where it answers and its database."""

    base: str
    dsn: str


@contextlib.contextmanager
def serve(pg_uri: str, tmp_path_factory: pytest.TempPathFactory, **settings: str) -> Iterator[Served]:
    """`haki-context serve` on a free loopback port against a fresh database, in development mode
    with the hashing embedder and any other HAKI_ `settings`; yields once /readyz says ready, and
    stops the server and drops its database after."""
    dsn = asyncio.run(fresh_database(pg_uri))
    port = free_port()
    env = haki_env(
        HAKI_DATABASE_URL=dsn,
        HAKI_EMBED_PROVIDER="hashing",
        HAKI_DEV_MODE="1",
        HAKI_DATA_DIR=str(tmp_path_factory.mktemp("haki-serve-data")),
        **settings,
    )
    log = (tmp_path_factory.mktemp("haki-serve-log") / "serve.log").open("w+b")
    proc = subprocess.Popen(
        [CLI, "serve", "--host", "127.0.0.1", "--port", str(port)], env=env, stdout=log, stderr=subprocess.STDOUT
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                log.seek(0)
                pytest.fail(f"haki-context serve exited with {proc.returncode}:\n{log.read().decode(errors='replace')}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline:
                pytest.fail("haki-context serve was not ready within 60 s")
            time.sleep(0.1)
        yield Served(base, dsn)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        asyncio.run(drop_database(pg_uri, dsn))


# ---------------------------------------------------------------- the browser


class CDP:
    """A minimal Chrome DevTools Protocol client over the browser's websocket (flattened sessions)."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.ids = itertools.count(1)
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.listeners: list[Callable[[str, dict[str, Any]], None]] = []
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        try:
            async for raw in self.ws:
                msg = json.loads(raw)
                if "id" in msg:
                    future = self.pending.pop(msg["id"], None)
                    if future is not None and not future.done():
                        future.set_result(msg)
                else:
                    for listener in self.listeners:
                        listener(msg["method"], msg.get("params", {}))
        finally:
            for future in self.pending.values():
                if not future.done():
                    future.set_exception(ConnectionError("the DevTools connection closed"))

    async def send(
        self, method: str, params: dict[str, Any] | None = None, session: str | None = None
    ) -> dict[str, Any]:
        msg_id = next(self.ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending[msg_id] = future
        msg: dict[str, Any] = {"id": msg_id, "method": method, "params": params or {}}
        if session is not None:
            msg["sessionId"] = session
        await self.ws.send(json.dumps(msg))
        reply = await asyncio.wait_for(future, timeout=15)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        result: dict[str, Any] = reply["result"]
        return result

    async def close(self) -> None:
        self.reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self.reader
        await self.ws.close()


@contextlib.asynccontextmanager
async def browser(chromium: str) -> AsyncIterator[CDP]:
    """Headless Chromium that can reach loopback and nothing else; yields a CDP connection to it."""
    profile = tempfile.mkdtemp(prefix="haki-chromium-")
    args = [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-quic",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-extensions",
        "--disable-features=MediaRouter,OptimizationHints,Translate",
        "--metrics-recording-only",
        "--mute-audio",
        "--window-size=1400,900",
        # Closing the network: no name resolves (except 127.0.0.1, which needs
        # none), and every request Chromium would send off the machine goes to
        # a proxy on the discard port, where nothing listens.
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
        "--proxy-server=http://127.0.0.1:9",
        "--proxy-bypass-list=127.0.0.1",
        "--remote-debugging-address=127.0.0.1",
        "--remote-debugging-port=0",
        f"--user-data-dir={profile}",
        "about:blank",
    ]
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    cdp: CDP | None = None
    try:
        # Chromium writes "<port>\n<browser ws path>" here once DevTools listens.
        active = Path(profile) / "DevToolsActivePort"
        deadline = time.monotonic() + 20
        while not (active.exists() and len(active.read_text().splitlines()) >= 2):
            if proc.poll() is not None:
                stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                pytest.fail(f"chromium exited with {proc.returncode}:\n{stderr[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail("chromium did not open its DevTools port within 20 s")
            await asyncio.sleep(0.05)
        port, path = active.read_text().splitlines()[:2]
        ws = await connect(f"ws://127.0.0.1:{port}{path}", max_size=None, open_timeout=10)
        cdp = CDP(ws)
        yield cdp
    finally:
        if cdp is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(cdp.send("Browser.close"), timeout=5)
            await cdp.close()
        if proc.poll() is None:
            proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()
        shutil.rmtree(profile, ignore_errors=True)


def leaves_machine(url: str) -> bool:
    """Whether a URL the page asked for would leave the loopback interface."""
    parts = urlsplit(url)
    if parts.scheme in LOCAL_SCHEMES:
        return False
    return parts.hostname not in LOOPBACK_HOSTS


async def wait_for(
    read: Callable[[], Awaitable[Any]], what: str, until: Callable[[Any], bool] = bool, timeout: float = 10.0
) -> Any:
    """Poll `read()` until `until(value)`; the timeout message shows the last value read."""
    deadline = time.monotonic() + timeout
    while True:
        value = await read()
        if until(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}; last seen: {value!r:.2000}")
        await asyncio.sleep(0.05)


# ---------------------------------------------------------------- a tab


@dataclass
class Page:
    """One tab on the server at `base`, with what it asked the network for and what went wrong:
    `failures` are HTTP errors, `network_errors` requests that got no response at all."""

    cdp: CDP
    session: str
    base: str
    shots: Path
    requests: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    network_errors: list[str] = field(default_factory=list)
    exceptions: list[str] = field(default_factory=list)

    @classmethod
    @contextlib.asynccontextmanager
    async def opened(cls, chromium: str, base: str, shots: Path) -> AsyncIterator[Self]:
        """A blank tab in a fresh `browser`, listening to its network, page and scripts."""
        async with browser(chromium) as cdp:
            target = await cdp.send("Target.createTarget", {"url": "about:blank"})
            session = (await cdp.send("Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}))[
                "sessionId"
            ]
            page = cls(cdp, session, base, shots)
            cdp.listeners.append(page.on_event)
            for domain in ("Network", "Page", "Runtime"):
                await cdp.send(f"{domain}.enable", session=session)
            yield page

    def on_event(self, method: str, params: dict[str, Any]) -> None:
        if params.get("sessionId") not in (None, self.session) and method.startswith("Target."):
            return
        if method == "Network.requestWillBeSent":
            self.requests.append(params["request"]["url"])
        elif method == "Network.webSocketCreated":
            self.requests.append(params["url"])
        elif method == "Network.responseReceived" and params["response"]["status"] >= 400:
            self.failures.append(f"{params['response']['status']} {params['response']['url']}")
        elif method == "Network.loadingFailed" and not params.get("canceled"):
            self.network_errors.append(f"{params.get('errorText')} ({params['requestId']})")
        elif method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            self.exceptions.append(details.get("exception", {}).get("description") or details.get("text", "?"))

    async def navigate(self, path: str) -> None:
        """Go to `path` on the server (not waiting for the page to load)."""
        await self.cdp.send("Page.navigate", {"url": f"{self.base}{path}"}, session=self.session)

    async def js(self, expression: str) -> Any:
        """The value of `expression` in the page (awaited, where it is a promise)."""
        reply = await self.cdp.send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
            session=self.session,
        )
        if "exceptionDetails" in reply:
            raise AssertionError(f"{expression!r} threw: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    async def wait(self, expression: str, what: str, until: Any = bool, timeout: float = 10.0) -> Any:
        """Wait until `expression`, evaluated in the page, satisfies `until`; a timeout adds what
        `explain` says of the page, to say why."""
        try:
            return await wait_for(lambda: self.js(expression), what, until, timeout)
        except AssertionError as exc:
            raise AssertionError(f"{exc}{await self.explain()}") from None

    async def explain(self) -> str:
        """What a timed-out `wait` adds to its message; a page that shows its errors says them here."""
        return ""

    async def text(self, selector: str) -> str:
        value = await self.js(f"document.querySelector({json.dumps(selector)})?.innerText ?? ''")
        return str(value)

    async def click(self, selector: str) -> None:
        """A real mouse click (press and release) at the middle of the element's first box (a link
        may wrap), scrolled into view."""
        box = await self.js(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)}); e.scrollIntoView({{block: 'center'}});"
            " const r = e.getClientRects()[0]; return {x: r.x + r.width / 2, y: r.y + r.height / 2}; })()"
        )

        for kind in ("mousePressed", "mouseReleased"):
            await self.cdp.send(
                "Input.dispatchMouseEvent",
                {"type": kind, "x": box["x"], "y": box["y"], "button": "left", "clickCount": 1},
                session=self.session,
            )

    async def screenshot(self, name: str, height: int | None = None) -> None:
        """The view from the top, as `shots`/<name>.png: the window, or the page's first `height` pixels."""
        await self.js("window.scrollTo(0, 0)")
        params: dict[str, Any] = {"format": "png"}
        if height is not None:
            width = await self.js("document.documentElement.clientWidth")
            params.update(
                clip={"x": 0, "y": 0, "width": width, "height": height, "scale": 1}, captureBeyondViewport=True
            )
        shot = await self.cdp.send("Page.captureScreenshot", params, session=self.session)
        png = self.shots / f"{name}.png"
        png.write_bytes(base64.b64decode(shot["data"]))
        print(f"screenshot: {png}")

    def check_clean(self, allow: list[str] | None = None) -> None:
        """Nothing left the machine, no response was an HTTP error (but the refusals in `allow`), no
        script threw. `network_errors` are the caller's to check."""
        off_machine = [url for url in self.requests if leaves_machine(url)]
        assert not off_machine, f"the page tried to leave the machine: {off_machine}"
        failures = [f for f in self.failures if not any(f.startswith(a) for a in allow or [])]
        assert not failures, f"failed requests: {failures}"
        assert not self.exceptions, f"uncaught JavaScript exceptions: {self.exceptions}"
