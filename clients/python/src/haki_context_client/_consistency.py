"""Read-your-writes against a server with read replicas: the consistency token.

A response to an operation that wrote something carries a token: the primary's write-ahead log
position after the commit, as PostgreSQL writes one (`0/16B3748`: the high and low 32 bits in
hexadecimal), in the `Haki-Consistency-Token` header and in `extensions.consistencyToken`. A
request that sends a token back in the same header is served by a replica that has replayed past
it, or by the primary.

The client keeps the highest token of its mutations' responses (`ConsistencyToken`) and sends
it on every later request. It tells a mutation from a query by the keyword of the operation the
request selects (`is_mutation`), read from the document by a small lexer that skips comments
and strings: the client needs no GraphQL parser.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Mapping
from typing import Any

TOKEN_HEADER = "Haki-Consistency-Token"
"""The header a response carries its token in, and a request sends one back in."""
TOKEN_EXTENSION = "consistencyToken"
"""The key of a GraphQL response's `extensions` that holds the same token."""

_TOKEN = re.compile(r"([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})")


def token_position(token: object) -> int | None:
    """The log position a token names, `(hi << 32) | lo`; None when it is not a well-formed token."""
    if not isinstance(token, str):
        return None
    match = _TOKEN.fullmatch(token.strip())
    if match is None:
        return None
    return (int(match[1], 16) << 32) | int(match[2], 16)


def _checked(token: str) -> tuple[str, int]:
    """`token` stripped and its position; ValueError when it is malformed."""
    position = token_position(token)
    if position is None:
        raise ValueError(f"not a consistency token (like 0/16B3748): {token!r}")
    return token.strip(), position


class ConsistencyToken:
    """The highest token a client has adopted, shared by its calls (threads or tasks alike)."""

    def __init__(self, token: str | None = None) -> None:
        self._lock = threading.Lock()
        self._token: str | None = None
        self._position = -1
        self.replace(token)

    @property
    def token(self) -> str | None:
        """The token held; None before any write."""
        return self._token

    def replace(self, token: str | None) -> None:
        """Hold `token` whatever it is lower than (None forgets the one held); ValueError when
        it is malformed."""
        token, position = (None, -1) if token is None else _checked(token)
        with self._lock:
            self._token, self._position = token, position

    def advance(self, token: str) -> str:
        """Hold `token` when it is higher than the one held; the token held then. ValueError
        when it is malformed."""
        text, position = _checked(token)
        return self._advance(text, position)

    def adopt(self, headers: Mapping[str, str], body: Any) -> None:
        """Adopt a response's token, from its header or else from its `extensions`, when it is
        higher than the one held; a malformed or missing one is ignored."""
        for candidate in (headers.get(TOKEN_HEADER), _extension_token(body)):
            position = token_position(candidate)
            if position is not None:
                assert isinstance(candidate, str)
                self._advance(candidate.strip(), position)
                return

    def headers(self) -> dict[str, str]:
        """The request header that sends the token held; none before any write."""
        token = self._token
        return {} if token is None else {TOKEN_HEADER: token}

    def _advance(self, token: str, position: int) -> str:
        with self._lock:
            if position > self._position:
                self._token, self._position = token, position
            held = self._token
        assert held is not None
        return held


def _extension_token(body: Any) -> Any:
    if not isinstance(body, dict):
        return None
    extensions = body.get("extensions")
    return extensions.get(TOKEN_EXTENSION) if isinstance(extensions, dict) else None


# ----------------------------------------------------------- which operation a request runs

_LEXEME = re.compile(
    r"""
    (?P<skip>[\s,\ufeff]+ | \#[^\n\r]*)          # white space, commas, comments
  | (?P<block>\"\"\"(?:\\\"\"\"|.)*?\"\"\")      # a block string (\""" escapes its quotes)
  | (?P<string>"(?:\\.|[^"\\\n\r])*")           # a string
  | (?P<name>[_A-Za-z][_0-9A-Za-z]*)
  | (?P<punct>.)
    """,
    re.VERBOSE | re.DOTALL,
)
_OPERATION_KEYWORDS = frozenset({"query", "mutation", "subscription"})
_OPENING, _CLOSING = frozenset("{(["), frozenset("})]")


def document_operations(document: str) -> list[tuple[str, str | None]]:
    """The operations a GraphQL document defines, in order: (keyword, name or None). The
    shorthand `{ ... }` is an anonymous query; fragments are left out."""
    operations: list[tuple[str, str | None]] = []
    expecting = "definition"  # then "name" after an operation's keyword, then "body"
    keyword = ""
    depth = 0
    for lexeme in _LEXEME.finditer(document):
        kind, text = lexeme.lastgroup, lexeme.group()
        if kind in ("skip", "block", "string"):
            continue
        if kind == "name":
            if depth == 0 and expecting == "definition":
                if text in _OPERATION_KEYWORDS:
                    keyword, expecting = text, "name"
                else:
                    expecting = "body"  # a fragment
            elif depth == 0 and expecting == "name":
                operations.append((keyword, text))
                expecting = "body"
            continue
        if depth == 0 and expecting == "definition" and text == "{":
            operations.append(("query", None))
            expecting = "body"
        elif depth == 0 and expecting == "name":  # `(`, `@` or `{` right after the keyword
            operations.append((keyword, None))
            expecting = "body"
        if text in _OPENING:
            depth += 1
        elif text in _CLOSING and depth > 0:
            depth -= 1
            if depth == 0 and text == "}":
                expecting = "definition"
    return operations


@functools.lru_cache(maxsize=512)
def operation_keyword(document: str, operation_name: str | None) -> str | None:
    """`query`, `mutation` or `subscription`: the operation a request of `document` and
    `operation_name` runs; None when it names none (the server refuses such a request)."""
    operations = document_operations(document)
    if not operation_name:
        return operations[0][0] if len(operations) == 1 else None
    return next((keyword for keyword, name in operations if name == operation_name), None)


def is_mutation(document: str, operation_name: str | None) -> bool:
    """Whether the request runs a mutation (cached per document and operation name)."""
    return "mutation" in document and operation_keyword(document, operation_name) == "mutation"
