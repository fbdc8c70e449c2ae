"""The dashboard page at /dashboard and the front page at /.

The dashboard is a static page (haki_context/static/dashboard/) that talks only to the public
GraphQL API, as any dashboard author's client would; the server adds nothing for it but these
two pages. Both are answered with `no-cache` so an upgraded server is never shown with an older
script.
"""

from __future__ import annotations

import functools
from importlib import resources

from starlette.requests import Request
from starlette.responses import HTMLResponse

__all__ = ["dashboard_page", "front_page"]

_NO_CACHE = {"Cache-Control": "no-cache"}

_FRONT_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>haki-context</title>
<link rel="icon" href="/static/dashboard/favicon.svg" type="image/svg+xml">
<link rel="stylesheet" href="/static/dashboard/dashboard.css">
</head>
<body class="front">
<main>
<h1>haki-context</h1>
<p>Long-term memory for AI agents, served over GraphQL.</p>
<ul>
<li><a href="/dashboard">Dashboard</a>: live context calls, one call's every decision, a subject's memory, usage over time.</li>
<li><a href="/graphql">GraphQL</a>: the API (POST), and GraphiQL in a browser where it is enabled.</li>
</ul>
</main>
</body>
</html>
"""


@functools.lru_cache(maxsize=1)
def _dashboard_html() -> str:
    """The page, read once from the package."""
    return resources.files("haki_context").joinpath("static/dashboard/index.html").read_text(encoding="utf-8")


async def dashboard_page(request: Request) -> HTMLResponse:
    """GET /dashboard: the dashboard (its scripts and styles are served under /static/dashboard/)."""
    return HTMLResponse(_dashboard_html(), headers=_NO_CACHE)


async def front_page(request: Request) -> HTMLResponse:
    """GET /: where to go, the dashboard or the API."""
    return HTMLResponse(_FRONT_PAGE, headers=_NO_CACHE)
