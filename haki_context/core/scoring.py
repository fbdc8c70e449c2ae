"""The hybrid score (DESIGN.md step 4) and its components.

score = w_sim * (1 - cosine distance) + w_ft * full_text + w_rec * exp(-Δt / τ),
Δt = now - coalesce(valid_from, recorded_at); full_text is the rank SQL computes
(`full_text_rank`, db/retrieval.py). The weights and τ are settings;
they are not part of the public contract.

`fusion` chooses how the axes combine over one candidate pool:
- "weighted" (the seed): the raw components, weighted;
- "normalized": the full-text rank divided by the pool's best, so that the
  lexical axis spans 0..1 like similarity does (raw ts_rank_cd values of an
  OR-of-lexemes query vary with the question's length);
- "rrf": reciprocal-rank fusion, w_sim / (60 + similarity rank) +
  w_ft / (60 + full-text rank) + w_rec * recency / 60 (rows without a
  full-text match get no full-text term).
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


@dataclass(slots=True)  # not frozen: one per candidate, and a frozen __init__ costs ~1 us more
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


RRF_K = 60.0


def score_pool(
    raw: list[tuple[float, float, datetime]], now: datetime, w: Weights, fusion: str = "weighted"
) -> list[Components]:
    """Components and fused score of every (distance, full_text, dated) of one candidate pool."""
    if fusion == "weighted":
        return [components(d, ft, at, now, w) for d, ft, at in raw]
    if fusion == "normalized":
        best = max((ft for _, ft, _ in raw), default=0.0)
        scale = best if best > 0 else 1.0
        out = []
        for d, ft, at in raw:
            c = components(d, ft, at, now, w)
            score = w.similarity * c.similarity + w.full_text * (ft / scale) + w.recency * c.recency
            out.append(Components(c.similarity, ft, c.recency, d, score))
        return out
    if fusion == "rrf":
        by_sim = sorted(range(len(raw)), key=lambda i: raw[i][0])
        by_ft = sorted((i for i in range(len(raw)) if raw[i][1] > 0), key=lambda i: -raw[i][1])
        sim_rank = {i: r for r, i in enumerate(by_sim, start=1)}
        ft_rank = {i: r for r, i in enumerate(by_ft, start=1)}
        out = []
        for i, (d, ft, at) in enumerate(raw):
            c = components(d, ft, at, now, w)
            score = w.similarity / (RRF_K + sim_rank[i]) + w.recency * c.recency / RRF_K
            if i in ft_rank:
                score += w.full_text / (RRF_K + ft_rank[i])
            out.append(Components(c.similarity, ft, c.recency, d, score))
        return out
    raise ValueError(f"unknown fusion {fusion!r} (use weighted, normalized or rrf)")
