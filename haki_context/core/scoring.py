"""The hybrid score (DESIGN.md step 4) and its components.

score = w_sim * (1 - cosine distance) + w_ft * ts_rank_cd + w_rec * exp(-Δt / τ),
Δt = now - coalesce(valid_from, recorded_at). The weights and τ are settings;
they are not part of the public contract.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from ..settings import Settings


@dataclass(frozen=True)
class Weights:
    similarity: float
    full_text: float
    recency: float
    tau_seconds: float

    @classmethod
    def from_settings(cls, s: Settings) -> Weights:
        return cls(s.weight_similarity, s.weight_full_text, s.weight_recency, s.recency_tau_days * 86400.0)


@dataclass(frozen=True)
class Components:
    similarity: float
    full_text: float
    recency: float
    distance: float
    score: float


def recency(at: datetime, now: datetime, tau_seconds: float) -> float:
    """exp(-age / τ); an item dated in the future counts as new."""
    age = max(0.0, (now - at).total_seconds())
    return math.exp(-age / tau_seconds)


def components(distance: float, full_text: float, at: datetime, now: datetime, w: Weights) -> Components:
    similarity = 1.0 - distance
    rec = recency(at, now, w.tau_seconds)
    score = w.similarity * similarity + w.full_text * full_text + w.recency * rec
    return Components(similarity, full_text, rec, distance, score)
