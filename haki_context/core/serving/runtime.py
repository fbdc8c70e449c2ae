"""What every core operation needs: the pool, the embedder and the settings."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import asyncpg

from ...db.embedded import EmbeddedPostgres
from ...db.pool import create_pool
from ...settings import Settings
from ..embedding.embedder import Embedder
from .admission import Admission
from .replicas import PrimaryReads, Reads, ReplicaSet
from .scope_indexes import OwnIndexHints, ScopeGrowth


@dataclass(frozen=True)
class Runtime:
    """Process-wide resources, opened by the app's lifespan.

    The server itself holds no state: `own_indexes` is a hint for choosing
    statement texts, which every statement checks (core/serving/scope_indexes.py).

    Writes use `pool`, the primary's. Read-only statements run on `reads`: the primary's pool
    too, unless a request was routed to the replicas (`routed`, core/serving/replicas.py).
    """

    pool: asyncpg.Pool
    embedder: Embedder
    settings: Settings
    own_indexes: OwnIndexHints = field(default_factory=OwnIndexHints)
    # Writes that take a scope to an indexed size wake the index pass (shared by routed copies).
    scope_growth: ScopeGrowth = field(default_factory=ScopeGrowth)
    # The embedded server this process started or attached to; None with HAKI_DATABASE_URL.
    embedded: EmbeddedPostgres | None = None
    # The read replicas of HAKI_REPLICA_URLS; None without any.
    replicas: ReplicaSet | None = None
    # One request's route to the replicas (`routed`); None: reads use `pool`, the primary's.
    route: Reads | None = None
    # Built from `settings`, never passed nor copied: a runtime made with other settings
    # (dataclasses.replace) gets its own admission with that runtime's limits.
    admission: Admission = field(init=False, repr=False, compare=False)
    # Reads on `pool`; made again with it (a runtime made with another pool reads from that one).
    _on_primary: PrimaryReads = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "admission", Admission.from_settings(self.settings))
        object.__setattr__(self, "_on_primary", PrimaryReads(self.pool))

    @property
    def reads(self) -> Reads:
        """Where read-only statements run: this request's route, else the primary's pool."""
        return self.route if self.route is not None else self._on_primary

    def routed(self, token: int | None) -> Runtime:
        """This runtime with one request's reads routed: to the replicas when the server has
        them (past `token`, a consistency token, when given), else itself unchanged."""
        if self.replicas is None:
            return self
        routed = replace(self, route=self.replicas.route(token))
        object.__setattr__(routed, "admission", self.admission)  # one process, one admission
        return routed


async def open_pool(
    dsn: str, settings: Settings, *, min_size: int | None = None, max_size: int | None = None
) -> asyncpg.Pool:
    """A pool on `dsn` whose connections carry the search settings of `settings` (HNSW and
    IVFFlat depths, statement timeout) and its idle lifetime; sizes default to the settings'.
    The one place those settings reach the pool: a new one is added here, not at each caller."""
    return await create_pool(
        dsn,
        min_size=settings.pool_min_size if min_size is None else min_size,
        max_size=settings.pool_max_size if max_size is None else max_size,
        idle_lifetime_s=settings.pool_idle_lifetime_s,
        statement_timeout_ms=settings.statement_timeout_ms,
        hnsw_ef_search=settings.hnsw_ef_search,
        hnsw_max_scan_tuples=settings.hnsw_max_scan_tuples,
        ivf_probes=settings.ivf_probes,
    )
