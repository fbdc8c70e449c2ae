"""What every core operation needs: the pool, the embedder and the settings."""

from __future__ import annotations

from dataclasses import dataclass, field

import asyncpg

from ..settings import Settings
from .embedder import Embedder
from .scope_indexes import OwnIndexHints


@dataclass(frozen=True)
class Runtime:
    """Process-wide resources, opened by the app's lifespan.

    The server itself holds no state: `own_indexes` is a hint for choosing
    statement texts, which every statement checks (core/scope_indexes.py).
    """

    pool: asyncpg.Pool
    embedder: Embedder
    settings: Settings
    own_indexes: OwnIndexHints = field(default_factory=OwnIndexHints)
