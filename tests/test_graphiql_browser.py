"""GraphiQL works offline, proved in a real headless Chromium with the network closed.

A real `haki-context serve` (its own process, its own database in the test
PostgreSQL) serves the IDE at /graphql; Debian's `chromium` opens it, driven
through the Chrome DevTools Protocol over a websocket (no Playwright, no
browser download; tests/browser_support.py, shared with the dashboard's
browser tests). The browser can reach loopback only: every host name
resolves to nothing, every other address goes to a dead proxy, and the test
fails if the page so much as tries a non-loopback URL.

The test then checks what a user sees: the editor renders with the example
operation, pressing the run button executes it and shows the result, and an
edited query runs too.

In CI (env CI set) a missing chromium fails the test; locally it is skipped.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from browser_support import Page, require_chromium, serve, wait_for

SUBJECT = "user-42"  # the subject of the example operation (app.EXAMPLE_OPERATION)


@pytest.fixture(scope="session")
def chromium() -> str:
    """Debian's chromium; session-scoped so that it is checked before the database starts."""
    return require_chromium("the GraphiQL browser test")


@pytest.fixture(scope="module")
def server(chromium: str, pg_uri: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`haki-context serve` on a free loopback port; yields its base URL once /readyz says ready."""
    with serve(pg_uri, tmp_path_factory) as served:
        yield served.base


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
    async with Page.opened(chromium, server, tmp_path) as page:

        async def response_text() -> str:
            return str(
                await page.js(f"document.querySelector({json.dumps(RESPONSE_PANE)})?.CodeMirror?.getValue() ?? ''")
            )

        await page.navigate("/graphql")

        # The IDE rendered: React mounted GraphiQL into the container, the query editor
        # is a live CodeMirror, and the schema arrived (the docs button appears with it).
        editor_text = await page.wait(
            f"document.querySelector('.graphiql-container {QUERY_EDITOR}')?.CodeMirror?.getValue()",
            "the GraphiQL query editor",
        )
        assert "query Context" in editor_text and "context(" in editor_text, editor_text
        await page.wait("!!document.querySelector('.graphiql-execute-button')", "the execute button")

        # Run the example operation as it opens, with the run button.
        await page.click(".graphiql-execute-button")
        text = await wait_for(response_text, "the example operation's result", lambda v: '"data"' in v)
        result = json.loads(text)
        assert not result.get("errors"), result
        packet = result["data"]["context"]
        assert packet["trace"]["id"]
        assert [(f["predicate"], f["value"]) for f in packet["facts"]] == [("invoice_language", "German")], packet
        assert "German" in packet["rendered"]
        await page.screenshot("graphiql-example")

        # An edited query runs too, and its result replaces the previous one.
        await page.js(
            f"document.querySelector({json.dumps(QUERY_EDITOR)}).CodeMirror.setValue({json.dumps(EDITED_QUERY)})"
        )
        # GraphiQL takes in an edit after a 100 ms debounce (then it knows the new
        # operation name); Strawberry's page then puts the query in the URL (?q=).
        await page.wait(
            "new URLSearchParams(location.search).get('q')",
            "the edited query in the page URL",
            lambda q: q == EDITED_QUERY,
        )
        await page.click(".graphiql-execute-button")
        text = await wait_for(response_text, "the edited query's result", lambda v: '"edges"' in v)
        assert json.loads(text) == {
            "data": {"facts": {"edges": [{"node": {"predicate": "invoice_language", "value": "German"}}]}}
        }

        await page.screenshot("graphiql-edited")

        assert f"{server}/static/graphiql/graphiql.min.js" in page.requests, page.requests
        page.check_clean()
        assert not page.network_errors, f"failed requests: {page.network_errors}"

        # And the network really is closed: the CDN the stock page loads from is
        # out of reach (no-cors, so a reachable host would resolve, not reject).
        probe = await page.js(
            f"fetch({json.dumps(CDN_PROBE)}, {{mode: 'no-cors'}}).then(() => 'reached', e => 'blocked')"
        )
        assert probe == "blocked", probe

        # Blocked by our dead proxy, not by chance (a machine that happens to be offline).
        async def proxy_refusals() -> list[str]:
            return [f for f in page.network_errors if "ERR_PROXY_CONNECTION_FAILED" in f]

        await wait_for(proxy_refusals, "the probe's request to fail at the dead proxy", timeout=5)
