"""Who is calling: the project an API key belongs to and what the key may do there
(docs/design.md "Tenancy and keys", "Key scopes")."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from ...db import keys as db_keys
from ..errors import Forbidden, InvalidInput, Unauthenticated
from .keys import hash_key
from .runtime import Runtime

DEV_PROJECT = "default"


class Scope(StrEnum):
    """What a key may do. Each root field of the schema asks for one as it starts
    (schema/query.py: READ; schema/mutation.py: WRITE, ERASE for forgetSubject)."""

    READ = "read"  # every query, `context` included (it writes its own trace)
    WRITE = "write"  # recording events, asserting, retracting, conflicts
    ERASE = "erase"  # forgetting a subject


# A key made without naming its scopes can read and write; erasing is only ever granted on purpose.
DEFAULT_SCOPES = frozenset({Scope.READ, Scope.WRITE})
ALL_SCOPES = frozenset(Scope)


class Origin(StrEnum):
    """How a caller got in: with a key, keyless in development mode, or as the operator (the CLI)."""

    KEY = "key"
    DEVELOPMENT = "development"
    OPERATOR = "operator"


@dataclass(frozen=True)
class Caller:
    """A request's caller: its project, what it may do, and which key (None without one)."""

    project_id: str
    scopes: frozenset[Scope]
    key_id: str | None = None
    origin: Origin = Origin.KEY

    @classmethod
    def operator(cls, project_id: str) -> Caller:
        """The command line, run by whoever holds the database: every scope, no key."""
        return cls(project_id, ALL_SCOPES, None, Origin.OPERATOR)

    def require(self, scope: Scope) -> None:
        """Raise Forbidden unless this caller holds `scope`."""
        if scope not in self.scopes:
            held = ", ".join(sorted(self.scopes)) or "none"
            raise Forbidden(
                f"this key lacks the `{scope}` scope (it holds: {held}); "
                f"create one with `haki-context keys create --scope {scope}`"
            )


def parse_scopes(names: Iterable[str]) -> frozenset[Scope]:
    """Scope names (`read`, `write`, `erase`) to a non-empty set; INVALID_INPUT otherwise."""
    scopes: set[Scope] = set()
    for name in names:
        try:
            scopes.add(Scope(name.strip().lower()))
        except ValueError:
            known = ", ".join(s.value for s in Scope)
            raise InvalidInput(f"unknown scope {name!r}: the scopes are {known}", field="scope") from None
    if not scopes:
        raise InvalidInput("a key needs at least one scope", field="scope")
    return frozenset(scopes)


class Authenticator:
    """Maps `Authorization: Bearer <key>` to a caller, with a short-lived lookup cache.

    The cache keeps the key lookup off most requests; a revoked key stops
    working within `ttl_seconds`.
    """

    def __init__(self, rt: Runtime, *, dev_mode: bool, ttl_seconds: float = 5.0) -> None:
        self._rt = rt
        self._dev_mode = dev_mode
        self._ttl = ttl_seconds
        self._cache: dict[bytes, tuple[float, Caller | None]] = {}

    async def caller_for(self, authorization: str | None) -> Caller:
        """The caller; raises Unauthenticated without a valid key outside dev mode.

        Only a missing header means "no key": a header that is there but not `Bearer <key>`
        is refused in every mode, so a client's broken header never writes as `default`.
        Development mode (loopback and keyless by design) grants every scope: whoever reaches
        it can run `haki-context forget` on the same database anyway."""
        if authorization is None:
            if self._dev_mode:
                return _DEV_CALLER
            raise Unauthenticated("an API key is required: send `Authorization: Bearer <key>`")
        token = _bearer(authorization)
        digest = hash_key(token)
        now = time.monotonic()
        hit = self._cache.get(digest)
        if hit is not None and hit[0] > now:
            caller = hit[1]
        else:
            grant = await db_keys.grant_for_hash(self._rt.pool, digest)
            caller = None if grant is None else _caller_of(grant)
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[digest] = (now + self._ttl, caller)
        if caller is None:
            raise Unauthenticated("the API key is not valid (unknown or revoked)")
        return caller


_DEV_CALLER = Caller(DEV_PROJECT, ALL_SCOPES, None, Origin.DEVELOPMENT)


def _caller_of(grant: db_keys.KeyGrant) -> Caller:
    # A name the server does not know (written by a newer version) grants nothing.
    known = {s.value for s in Scope}
    return Caller(grant.project_id, frozenset(Scope(s) for s in grant.scopes if s in known), grant.key_id)


# Longest key accepted: a generated key is far shorter, so anything longer is refused unhashed.
MAX_KEY_CHARS = 256


def authorization_of(values: list[str]) -> str | None:
    """The one Authorization header of a request, None when there is none; several are refused
    (which one a proxy or the server reads would differ)."""
    if len(values) > 1:
        raise Unauthenticated("send one Authorization header, not several")
    return values[0] if values else None


def _bearer(header: str) -> str:
    """The key of `Bearer <key>`: one scheme word, one key word, nothing else."""
    parts = header.split()
    if len(parts) != 2 or parts[0].lower() != "bearer":
        raise Unauthenticated("the Authorization header must be `Bearer <key>`")
    token = parts[1]
    if len(token) > MAX_KEY_CHARS or not token.isprintable() or not token.isascii():
        raise Unauthenticated("the API key is not valid (unknown or revoked)")
    return token
