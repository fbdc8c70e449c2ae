"""The dashboard's pages and files as the server serves them, and its GraphQL as the schema reads it.

What a browser does with them is tests/test_dashboard_browser.py; these need no browser: the
pages are served, every file they load comes from this server (nothing from elsewhere), and
every operation the dashboard sends is valid against the schema, so a schema change that would
break the reference client fails here.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from importlib import resources

import httpx
from graphql import parse, validate

from haki_context.schema import build_schema

STATIC = resources.files("haki_context").joinpath("static/dashboard")
# A URL to another host: the page must fetch nothing from anywhere but its server.
ABSOLUTE_URL = re.compile(r"""(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}""", re.IGNORECASE)
# A GraphQL document in dashboard.js: `const NAME = `...`;`, with ${OTHER} parts.
DOCUMENT = re.compile(r"const ([A-Z_]+) = `(.*?)`;", re.DOTALL)
PART = re.compile(r"\$\{([A-Z_]+)\}")


class _Assets(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("src", "href") and value and tag in ("script", "link"):
                self.urls.append(value)


def assets_of(html: str) -> list[str]:
    parser = _Assets()
    parser.feed(html)
    return parser.urls


async def test_the_front_page_links_the_dashboard_and_the_api(http: httpx.AsyncClient) -> None:
    response = await http.get("/")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert 'href="/dashboard"' in response.text and 'href="/graphql"' in response.text


async def test_every_file_the_dashboard_loads_is_served_by_the_server(http: httpx.AsyncClient) -> None:
    page = await http.get("/dashboard")
    assert page.status_code == 200 and page.headers["cache-control"] == "no-cache"
    urls = assets_of(page.text)
    assert {"/static/dashboard/dashboard.js", "/static/dashboard/dashboard.css"} <= set(urls), urls
    for url in urls:
        assert url.startswith("/static/dashboard/"), url
        response = await http.get(url)
        assert response.status_code == 200, url
        if url.endswith((".js", ".css")):
            assert not ABSOLUTE_URL.search(response.text), f"{url} refers to another host"
    assert not ABSOLUTE_URL.search(page.text)


async def test_graphiql_links_to_the_dashboard(http: httpx.AsyncClient) -> None:
    response = await http.get("/graphql", headers={"accept": "text/html"})
    assert response.status_code == 200
    assert 'href="/dashboard"' in response.text


def dashboard_documents() -> dict[str, str]:
    """The dashboard's GraphQL operations by constant name, fragments and parts filled in."""
    source = STATIC.joinpath("dashboard.js").read_text(encoding="utf-8")
    raw = dict(DOCUMENT.findall(source))

    def filled(text: str) -> str:
        return PART.sub(lambda m: filled(raw[m.group(1)]), text)

    return {
        name: filled(text)
        for name, text in raw.items()
        if text.lstrip().startswith(("query ", "mutation ", "subscription "))
    }


def test_every_operation_the_dashboard_sends_is_valid_against_the_schema() -> None:
    documents = dashboard_documents()
    # The views' reads and writes, the live subscription and the plots' series among them.
    assert {"TRACES", "TRACE_ADDED", "TRACE", "FACTS", "EVENTS", "RESOLVE", "DISMISS", "STATS", "SERIES"} <= set(
        documents
    ), sorted(documents)
    schema = build_schema()
    for name, text in documents.items():
        errors = validate(schema._schema, parse(text))
        assert not errors, f"{name}: {[e.message for e in errors]}"
