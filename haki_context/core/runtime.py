"""What every core operation needs: the pool, the embedder and the settings."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from ..settings import Settings
from .embedder import Embedder


@dataclass(frozen=True)
class Runtime:
    """Process-wide resources, opened by the app's lifespan (the server itself holds no state)."""

    pool: asyncpg.Pool
    embedder: Embedder
    settings: Settings
