"""The media type a GraphQL response is written in, chosen from the request's `Accept` header.

GraphQL over HTTP (https://graphql.github.io/graphql-over-http/draft/) has two:

- `application/graphql-response+json`: the status code tells the outcome. A request that
  fails before execution (a document that does not parse or validate, variables that do not
  coerce) is answered 4xx with no `data` entry.
- `application/json`, the legacy type every client reads: a well-formed request is answered
  200 whatever its errors, with `"data": null` when nothing ran.

The choice, in order: a type the header names (with q > 0) wins over one that only a
wildcard (`*/*`, `application/*`) admits; among named types the higher q, then the one listed
first. A wildcard alone, or no `Accept` header at all, gets `application/json`: what clients
written before the new type expect, and what the graphql-http audit asks for. A header that
admits neither type gets None (the server answers 406 Not Acceptable).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class ResponseType(str, Enum):
    """A media type a GraphQL response can be written in."""

    GRAPHQL_RESPONSE_JSON = "application/graphql-response+json"
    JSON = "application/json"

    @property
    def content_type(self) -> str:
        """The `Content-Type` header of a response in this type (always UTF-8)."""
        return f"{self.value}; charset=utf-8"


# What a 406 answer lists as acceptable.
ACCEPTABLE = ", ".join(t.content_type for t in ResponseType)

_WILDCARDS = ("*/*", "application/*")
_BY_VALUE = {t.value: t for t in ResponseType}


@dataclass(frozen=True, slots=True)
class _Range:
    """One media range of an `Accept` header."""

    media: str
    q: float
    position: int


def negotiate(accept: str | None) -> ResponseType | None:
    """The response type for an `Accept` header (None or blank: the legacy default), or None when
    the header admits neither type."""
    if accept is None or not accept.strip():
        return ResponseType.JSON
    ranges = _parse(accept)
    refused = {r.media for r in ranges if r.q == 0}
    named = [r for r in ranges if r.q > 0 and r.media in _BY_VALUE]
    if named:
        best = max(named, key=lambda r: (r.q, -r.position))
        return _BY_VALUE[best.media]
    if any(r.q > 0 and r.media in _WILDCARDS for r in ranges):
        for candidate in (ResponseType.JSON, ResponseType.GRAPHQL_RESPONSE_JSON):
            if candidate.value not in refused:
                return candidate
    return None


def _parse(accept: str) -> list[_Range]:
    """The header's media ranges; a range whose charset is not UTF-8 admits none of our types,
    and one with a malformed q is dropped (RFC 9110 lets a server ignore what it cannot read)."""
    ranges = []
    for position, item in enumerate(accept.split(",")):
        media, *params = (part.strip() for part in item.split(";"))
        q = 1.0
        utf8 = True
        for param in params:
            name, _, value = param.partition("=")
            name, value = name.strip().lower(), value.strip().strip('"').lower()
            if name == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = -1.0
            elif name == "charset":
                utf8 = value in ("utf-8", "utf8")
        if media and 0 <= q <= 1 and utf8:
            ranges.append(_Range(media.lower(), q, position))
    return ranges
