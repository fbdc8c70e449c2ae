"""Consistency tokens: a position in the primary's write-ahead log, handed to a client after a
write and sent back so that its next reads see that write (read-your-writes on replicas).

A token is written as PostgreSQL writes a log position (`0/16B3748`: the high and low 32 bits
in hexadecimal), so an operator can compare it with `pg_current_wal_lsn()` by eye.
"""

from __future__ import annotations

import re

from ...db import replication
from ..errors import BadRequest
from .runtime import Runtime

# The header a response carries its token in, and a request sends one back in.
TOKEN_HEADER = "Haki-Consistency-Token"
# The key of the GraphQL response's `extensions` that holds the same token.
TOKEN_EXTENSION = "consistencyToken"

_TOKEN = re.compile(r"([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})")


def format_token(position: int) -> str:
    """`position` (bytes from the log's start) as PostgreSQL writes a log position."""
    return f"{position >> 32:X}/{position & 0xFFFFFFFF:X}"


def parse_token(text: str | None) -> int | None:
    """The position a request's token names; None without one; BAD_REQUEST when malformed."""
    if text is None or not text.strip():
        return None
    match = _TOKEN.fullmatch(text.strip())
    if match is None:
        raise BadRequest(
            f"the {TOKEN_HEADER} header must hold a token a response gave (like 0/16B3748), not {text[:40]!r}"
        )
    return (int(match[1], 16) << 32) | int(match[2], 16)


async def written_position(rt: Runtime) -> str:
    """The token of what this request wrote: the primary's position once its writes committed
    (read after them, so every one of their commits ends at or before it)."""
    async with rt.pool.acquire() as conn:
        return format_token(await replication.wal_position(conn))


def reads_on_primary(rt: Runtime) -> None:
    """Send the rest of a request's reads to the primary (a mutation's response reads back what
    the mutation wrote, which a replica may not hold yet)."""
    rt.reads.use_primary()


class SessionToken:
    """The token a client session sends back: the highest its writes were given, so that its
    reads see every one of them. Held by a session of the server's own (an MCP session); a
    remote client holds its own (the Python client does)."""

    __slots__ = ("held",)

    def __init__(self, held: int | None = None) -> None:
        self.held = held

    def wrote(self, token: str | None) -> None:
        """Keep `token`, a write's, when it is past the one held."""
        position = parse_token(token) if token else None
        if position is not None and (self.held is None or position > self.held):
            self.held = position
