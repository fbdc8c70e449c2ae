"""API keys: generation and hashing. The plain key is shown once, never stored."""

from __future__ import annotations

import hashlib
import secrets
import uuid
from dataclasses import dataclass

KEY_PREFIX = "hk_"


@dataclass(frozen=True)
class NewKey:
    key_id: str
    plain: str
    prefix: str
    key_hash: bytes


def generate() -> NewKey:
    """A new random key: `hk_` + 43 url-safe characters (256 bits)."""
    plain = KEY_PREFIX + secrets.token_urlsafe(32)
    return NewKey(key_id=str(uuid.uuid4()), plain=plain, prefix=plain[:10], key_hash=hash_key(plain))


def hash_key(plain: str) -> bytes:
    """SHA-256 of the key: keys are 256-bit random, so a fast hash is enough (no password stretching)."""
    return hashlib.sha256(plain.encode()).digest()
