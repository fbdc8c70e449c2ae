"""GraphiQL page that works offline.

Strawberry's stock GraphiQL page loads React, GraphiQL and the explorer plugin
from unpkg.com, so it renders as a blank page without Internet access. This
module takes that exact page and points every script and stylesheet at copies
served by our own server (vendored in ``haki_context/static/graphiql/`` by
``scripts/refresh_graphiql.sh``), and opens the editor on a query of our
choosing. Everything else (fetcher POSTing to the page's own URL, headers
editor for ``Authorization: Bearer ...``, explorer plugin, ``?q=`` sharing) is
Strawberry's own script, untouched.

It deliberately imports nothing from the rest of ``haki_context``.
"""

from __future__ import annotations

import functools
import html
import json
import re

from strawberry.http.ides import get_graphql_ide_html

__all__ = ["VENDORED_FILES", "render_graphiql_page"]

# CDN URL in Strawberry's template -> file name in the vendored directory.
# The versions are spelled out on purpose: if a strawberry-graphql upgrade
# changes them, the URL no longer matches and rendering fails loudly (instead
# of silently serving older files than the template expects). Then update this
# table and scripts/refresh_graphiql.sh together.
VENDORED_FILES: dict[str, str] = {
    "https://unpkg.com/react@18.2.0/umd/react.production.min.js": "react.production.min.js",
    "https://unpkg.com/react-dom@18.2.0/umd/react-dom.production.min.js": ("react-dom.production.min.js"),
    "https://unpkg.com/js-cookie@3.0.5/dist/js.cookie.min.js": "js.cookie.min.js",
    "https://unpkg.com/graphiql@3.8.3/graphiql.min.css": "graphiql.min.css",
    "https://unpkg.com/graphiql@3.8.3/graphiql.min.js": "graphiql.min.js",
    "https://unpkg.com/@graphiql/plugin-explorer@1.0.2/dist/style.css": "plugin-explorer.css",
    "https://unpkg.com/@graphiql/plugin-explorer@1.0.2/dist/index.umd.js": ("plugin-explorer.umd.js"),
}

# A <script ...> or <link ...> start tag. Attribute values are matched as
# quoted strings because the favicon <link> has an inline SVG, with '>' in it,
# as its href; a naive [^>]* would cut that tag in half.
_TAG_RE = re.compile(r"""<(script|link)\b((?:[^>"']|"[^"]*"|'[^']*')*)>""", re.IGNORECASE)
_URL_ATTR_RE = re.compile(r"""\b(src|href)\s*=\s*"([^"]*)\"""", re.IGNORECASE)
_REL_RE = re.compile(r"""\brel\s*=\s*"([^"]*)\"""", re.IGNORECASE)

# Strawberry's welcome text, a JS template literal: `const EXAMPLE_QUERY = `...`;`.
# Its script uses it as the initial query unless the URL carries ?q=..., so
# replacing this one constant sets GraphiQL's `query` prop without touching
# the rest of the script.
_EXAMPLE_QUERY_RE = re.compile(r"const EXAMPLE_QUERY = `[^`]*`;")

# A link to the dashboard in GraphiQL's sidebar, below its three plugin buttons: the page's
# way to the traces the queries here produce.
_DASHBOARD_LINK = (
    '<a href="/dashboard" title="Traces, subjects and stats (the dashboard)" '
    'style="position:fixed;left:5px;top:176px;z-index:10;font:11px system-ui,sans-serif;'
    'color:#2f6fde;text-decoration:none">Dashboard</a>'
)


@functools.lru_cache(maxsize=1)
def _strawberry_template() -> str:
    """Strawberry's GraphiQL HTML, read once (it is a file in the package)."""
    return get_graphql_ide_html("graphiql")


def _js_string(value: str) -> str:
    """Encode ``value`` as a JS string literal safe inside an inline <script>.

    json.dumps gives a valid JS literal (ASCII only, so U+2028/U+2029 are
    escaped too). Escaping '<', '>' and '&' as \\u00XX stops a query that
    contains ``</script>`` or ``<!--`` from ending or confusing the script
    element; the JS value is unchanged.
    """
    return json.dumps(value, ensure_ascii=True).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render_graphiql_page(default_query: str, static_prefix: str = "/static/graphiql") -> str:
    """Return Strawberry's GraphiQL page, self-hosted and opened on ``default_query``.

    Args:
        default_query: GraphQL document shown in the editor when the page is
            opened without a ``?q=`` parameter (Strawberry keeps ``?q=``
            sharing; a shared link still wins).
        static_prefix: URL path under which the files of
            ``haki_context/static/graphiql/`` are served, without trailing slash.

    Returns:
        The complete HTML document. Its scripts and stylesheets all point to
        ``{static_prefix}/<file>``, without ``integrity``/``crossorigin``
        attributes (same-origin files need neither).

    Raises:
        RuntimeError: Strawberry's template no longer has the shape this
            function rewrites (e.g. after a strawberry-graphql upgrade changed
            the asset versions); the vendored files need refreshing.
    """
    prefix = html.escape(static_prefix.rstrip("/"), quote=True)
    unknown: list[str] = []

    def rewrite_tag(match: re.Match[str]) -> str:
        name, attrs = match.group(1).lower(), match.group(2)
        url_attr = _URL_ATTR_RE.search(attrs)
        if url_attr is None or not url_attr.group(2).startswith(("http://", "https://")):
            return match.group(0)  # inline <script>, data: favicon: nothing to fetch
        local = VENDORED_FILES.get(url_attr.group(2))
        if local is None:
            unknown.append(url_attr.group(2))
            return match.group(0)
        # Rebuild the tag rather than editing it: drops `integrity` (harmless
        # but pins bytes we already check in the refresh script) and
        # `crossorigin` (pointless for same-origin files).
        if name == "script":
            return f'<script src="{prefix}/{local}">'
        rel = _REL_RE.search(attrs)
        return f'<link rel="{rel.group(1) if rel else "stylesheet"}" href="{prefix}/{local}" />'

    template = _strawberry_template()
    page = _TAG_RE.sub(rewrite_tag, template)
    if unknown:
        raise RuntimeError(
            f"Strawberry's GraphiQL template loads assets that are not vendored: {unknown}; "
            "run scripts/refresh_graphiql.sh and update VENDORED_FILES"
        )

    # Belt and braces: any remaining CDN reference means the page would not
    # work offline, which is the whole point of this module. Checked before
    # the query goes in, so a query that mentions unpkg.com is not an error.
    if "unpkg.com" in page or "integrity=" in page:
        raise RuntimeError("GraphiQL page still references a CDN after rewriting")

    # A function replacement: a string one would interpret the backslashes of
    # the \u escapes as regex escapes.
    page, count = _EXAMPLE_QUERY_RE.subn(lambda _: f"const EXAMPLE_QUERY = {_js_string(default_query)};", page)
    if count != 1:
        raise RuntimeError("Strawberry's GraphiQL template has no EXAMPLE_QUERY to replace")
    if page.count("</body>") != 1:
        raise RuntimeError("Strawberry's GraphiQL template has no single </body> to put the dashboard link before")
    page = page.replace("</body>", f"{_DASHBOARD_LINK}\n  </body>")

    return page
