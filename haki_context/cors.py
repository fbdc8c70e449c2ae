"""Which browser pages may call the server from another origin (CORS), and with what.

Off unless HAKI_CORS_ORIGINS lists origins: a page elsewhere then gets no CORS headers, and its
browser refuses to send it a JSON POST (the preflight fails) or to show it the answer. Keys go
in the `Authorization` header, never in cookies, so credentials are not allowed: a page must
hold a key to call as a project. A development-mode server (no key needed) listed for `*`
would let any page read and write its memory.

The middleware answers a preflight (OPTIONS with `Access-Control-Request-Method`) itself,
before any route: the GraphQL endpoint still sees only GET and POST, and its key check comes
before the body is read as for any other caller.
"""

from __future__ import annotations

from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware

from .core.serving.consistency import TOKEN_HEADER
from .settings import Settings

# What a page may send: the key, the JSON body, the consistency token of its last write (read
# your writes), and the headers of the MCP streamable HTTP transport (its session, its protocol
# version, a resumed stream).
ALLOWED_HEADERS = (
    "Authorization",
    "Content-Type",
    TOKEN_HEADER,
    "Mcp-Session-Id",
    "Mcp-Protocol-Version",
    "Last-Event-ID",
)
# What a page may read besides the simple headers: when to retry a 503, a write's consistency
# token, the MCP session.
EXPOSED_HEADERS = ("Retry-After", TOKEN_HEADER, "Mcp-Session-Id")
# DELETE ends an MCP session.
ALLOWED_METHODS = ("GET", "POST", "DELETE", "OPTIONS")
# Seconds a browser may reuse a preflight's answer.
PREFLIGHT_MAX_AGE_S = 600


def cors_middleware(settings: Settings) -> list[Middleware]:
    """The CORS middleware for HAKI_CORS_ORIGINS, or none when no origin is configured."""
    if not settings.cors_origins:
        return []
    return [
        Middleware(
            CORSMiddleware,
            allow_origins=list(settings.cors_origins),
            allow_methods=list(ALLOWED_METHODS),
            allow_headers=list(ALLOWED_HEADERS),
            expose_headers=list(EXPOSED_HEADERS),
            allow_credentials=False,
            max_age=PREFLIGHT_MAX_AGE_S,
        )
    ]
