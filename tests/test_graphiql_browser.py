"""GraphiQL works offline, proved in a real headless Chromium with the network closed.

A real `haki-context serve` (its own process, its own database in the test
PostgreSQL) serves the IDE at /graphql; Debian's `chromium` opens it, driven
through the Chrome DevTools Protocol over a websocket (no Playwright, no
browser download). The browser can reach loopback only: every host name
resolves to nothing, every other address goes to a dead proxy, and the test
fails if the page so much as tries a non-loopback URL.

The test then checks what a user sees: the editor renders with the example
operation, pressing the run button executes it and shows the result, and an
edited query runs too.

In CI (env CI set) a missing chromium fails the test; locally it is skipped.
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
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect

CLI = str(Path(sys.executable).with_name("haki-context"))
SUBJECT = "user-42"  # the subject of the example operation (app.EXAMPLE_OPERATION)
LOOPBACK_HOSTS = {"127.0.0.1"}
# Schemes that never touch the network.
LOCAL_SCHEMES = {"data", "blob", "about", "chrome-error", "devtools"}


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="session")
def chromium() -> str:
    """Debian's chromium; session-scoped so that it is checked before the database starts."""
    path = find_chromium()
    if path is None:
        reason = "Debian's chromium is not installed (apt-get install chromium)"
        if os.environ.get("CI"):
            pytest.fail(f"{reason}; the GraphiQL browser test must run in CI", pytrace=False)
        pytest.skip(reason)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


@pytest.fixture(scope="module")
def server(chromium: str, pg_uri: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`haki-context serve` on a free loopback port; yields its base URL once /readyz says ready."""
    dsn = asyncio.run(fresh_database(pg_uri))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HAKI_")}
    env.update(
        HAKI_DATABASE_URL=dsn,
        HAKI_EMBED_PROVIDER="hashing",
        HAKI_DEV_MODE="1",
        HAKI_DATA_DIR=str(tmp_path_factory.mktemp("haki-browser-data")),
    )
    log = (tmp_path_factory.mktemp("haki-browser-log") / "serve.log").open("w+b")
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
        yield base
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        asyncio.run(drop_database(pg_uri, dsn))


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
        return reply["result"]

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


def seed(base: str) -> None:
    """A fact for the example operation's subject, so that running it serves something."""
    body = httpx.post(
        f"{base}/graphql",
        json={
            "query": "mutation($i: FactInput!) { assertFact(input: $i) { fact { id } } }",
            "variables": {"i": {"subjectId": SUBJECT, "predicate": "invoice_language", "value": "German"}},
        },
        timeout=10,
    ).json()
    assert not body.get("errors"), body


CDN_PROBE = "https://unpkg.com/react@18.2.0/umd/react.production.min.js"
QUERY_EDITOR = ".graphiql-query-editor .CodeMirror"
RESPONSE_PANE = ".graphiql-response .CodeMirror"
EDITED_QUERY = f'query Facts {{ facts(subjectId: "{SUBJECT}") {{ edges {{ node {{ predicate value }} }} }} }}'


async def test_graphiql_renders_and_runs_queries_offline(chromium: str, server: str, tmp_path: Path) -> None:
    seed(server)
    requests: list[str] = []
    failures: list[str] = []
    exceptions: list[str] = []

    def on_event(method: str, params: dict[str, Any]) -> None:
        if method == "Network.requestWillBeSent":
            requests.append(params["request"]["url"])
        elif method == "Network.webSocketCreated":
            requests.append(params["url"])
        elif method == "Network.responseReceived" and params["response"]["status"] >= 400:
            failures.append(f"{params['response']['status']} {params['response']['url']}")
        elif method == "Network.loadingFailed" and not params.get("canceled"):
            failures.append(f"{params.get('errorText')} ({params['requestId']})")
        elif method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            exceptions.append(details.get("exception", {}).get("description") or details.get("text", "?"))

    async with browser(chromium) as cdp:
        cdp.listeners.append(on_event)
        target = await cdp.send("Target.createTarget", {"url": "about:blank"})
        session = (await cdp.send("Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}))[
            "sessionId"
        ]
        for domain in ("Network", "Page", "Runtime"):
            await cdp.send(f"{domain}.enable", session=session)

        async def js(expression: str) -> Any:
            reply = await cdp.send(
                "Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=session
            )
            if "exceptionDetails" in reply:
                raise AssertionError(f"{expression!r} threw: {reply['exceptionDetails']}")
            return reply["result"].get("value")

        async def click(selector: str) -> None:
            """A real mouse click (press and release) at the middle of the element."""
            box = await js(
                f"(() => {{ const r = document.querySelector({json.dumps(selector)}).getBoundingClientRect();"
                " return {x: r.x + r.width / 2, y: r.y + r.height / 2}; })()"
            )
            for kind in ("mousePressed", "mouseReleased"):
                await cdp.send(
                    "Input.dispatchMouseEvent",
                    {"type": kind, "x": box["x"], "y": box["y"], "button": "left", "clickCount": 1},
                    session=session,
                )

        async def response_text() -> str:
            return await js(f"document.querySelector({json.dumps(RESPONSE_PANE)})?.CodeMirror?.getValue() ?? ''")

        async def screenshot(name: str) -> None:
            shot = await cdp.send("Page.captureScreenshot", {"format": "png"}, session=session)
            png = tmp_path / f"graphiql-{name}.png"
            png.write_bytes(base64.b64decode(shot["data"]))
            print(f"screenshot: {png}")

        await cdp.send("Page.navigate", {"url": f"{server}/graphql"}, session=session)

        # The IDE rendered: React mounted GraphiQL into the container, the query editor
        # is a live CodeMirror, and the schema arrived (the docs button appears with it).
        editor_text = await wait_for(
            lambda: js(f"document.querySelector('.graphiql-container {QUERY_EDITOR}')?.CodeMirror?.getValue()"),
            "the GraphiQL query editor",
        )
        assert "query Context" in editor_text and "context(" in editor_text, editor_text
        await wait_for(lambda: js("!!document.querySelector('.graphiql-execute-button')"), "the execute button")

        # Run the example operation as it opens, with the run button.
        await click(".graphiql-execute-button")
        text = await wait_for(response_text, "the example operation's result", lambda v: '"data"' in v)
        result = json.loads(text)
        assert not result.get("errors"), result
        packet = result["data"]["context"]
        assert packet["trace"]["id"]
        assert [(f["predicate"], f["value"]) for f in packet["facts"]] == [("invoice_language", "German")], packet
        assert "German" in packet["rendered"]
        await screenshot("example")

        # An edited query runs too, and its result replaces the previous one.
        await js(f"document.querySelector({json.dumps(QUERY_EDITOR)}).CodeMirror.setValue({json.dumps(EDITED_QUERY)})")
        # GraphiQL takes in an edit after a 100 ms debounce (then it knows the new
        # operation name); Strawberry's page then puts the query in the URL (?q=).
        await wait_for(
            lambda: js("new URLSearchParams(location.search).get('q')"),
            "the edited query in the page URL",
            lambda q: q == EDITED_QUERY,
        )
        await click(".graphiql-execute-button")
        text = await wait_for(response_text, "the edited query's result", lambda v: '"edges"' in v)
        assert json.loads(text) == {
            "data": {"facts": {"edges": [{"node": {"predicate": "invoice_language", "value": "German"}}]}}
        }

        await screenshot("edited")

        off_machine = [url for url in requests if leaves_machine(url)]
        assert not off_machine, f"the page tried to leave the machine: {off_machine}"
        assert f"{server}/static/graphiql/graphiql.min.js" in requests, requests
        assert not failures, f"failed requests: {failures}"
        assert not exceptions, f"uncaught JavaScript exceptions: {exceptions}"

        failures.clear()
        # And the network really is closed: the CDN the stock page loads from is
        # out of reach (no-cors, so a reachable host would resolve, not reject).
        probe = await cdp.send(
            "Runtime.evaluate",
            {
                "expression": f"fetch({json.dumps(CDN_PROBE)}, {{mode: 'no-cors'}}).then(() => 'reached', e => 'blocked')",
                "awaitPromise": True,
                "returnByValue": True,
            },
            session=session,
        )
        assert probe["result"]["value"] == "blocked", probe

        # Blocked by our dead proxy, not by chance (a machine that happens to be offline).
        async def proxy_refusals() -> list[str]:
            return [f for f in failures if "ERR_PROXY_CONNECTION_FAILED" in f]

        await wait_for(proxy_refusals, "the probe's request to fail at the dead proxy", timeout=5)
