"""Who is calling: the project an API key belongs to (docs/design.md "Tenancy and keys")."""

from __future__ import annotations

import time

from ..db import keys as db_keys
from .errors import Unauthenticated
from .keys import hash_key
from .runtime import Runtime

DEV_PROJECT = "default"


class Authenticator:
    """Maps `Authorization: Bearer <key>` to a project, with a short-lived lookup cache.

    The cache keeps the key lookup off most requests; a revoked key stops
    working within `ttl_seconds`.
    """

    def __init__(self, rt: Runtime, *, dev_mode: bool, ttl_seconds: float = 5.0) -> None:
        self._rt = rt
        self._dev_mode = dev_mode
        self._ttl = ttl_seconds
        self._cache: dict[bytes, tuple[float, str | None]] = {}

    async def project_for(self, authorization: str | None) -> str:
        """The caller's project; raises Unauthenticated without a valid key outside dev mode.

        Only a missing header means "no key": a header that is there but not `Bearer <key>`
        is refused in every mode, so a client's broken header never writes as `default`."""
        if authorization is None:
            if self._dev_mode:
                return DEV_PROJECT
            raise Unauthenticated("an API key is required: send `Authorization: Bearer <key>`")
        token = _bearer(authorization)
        digest = hash_key(token)
        now = time.monotonic()
        hit = self._cache.get(digest)
        if hit is not None and hit[0] > now:
            project = hit[1]
        else:
            project = await db_keys.project_for_hash(self._rt.pool, digest)
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[digest] = (now + self._ttl, project)
        if project is None:
            raise Unauthenticated("the API key is not valid (unknown or revoked)")
        return project


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
