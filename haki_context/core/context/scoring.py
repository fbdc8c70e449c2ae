"""The hybrid score of a candidate and its components.

score = w_sim * (1 - cosine distance) + w_ft * full_text + w_rec * exp(-Δt / τ),
Δt = now - the date the item holds from (a fact's valid_from or recorded_at, an
episode's occurred_at). full_text is the rank SQL computes (HAKI_FULL_TEXT_RANK:
by default the share of the query's idf mass the row holds, 0..1; see
db/retrieval.py). The weights and τ are settings, not part of the public contract.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from ...settings import Settings


@dataclass(frozen=True)
class Weights:
    """The score's weights and recency's time constant."""

    similarity: float
    full_text: float
    recency: float
    tau_seconds: float

    @classmethod
    def from_settings(cls, s: Settings) -> Weights:
        """The weights a server with `s` ranks by."""
        return cls(s.weight_similarity, s.weight_full_text, s.weight_recency, s.recency_tau_days * 86400.0)


@dataclass(slots=True)  # not frozen: one is made per candidate, on the hot path
class Components:
    """A candidate's score and what it is made of (each traced)."""

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
    """The score of a candidate at cosine `distance` with full-text rank `full_text`, dated `at`."""
    similarity = 1.0 - distance
    rec = recency(at, now, w.tau_seconds)
    score = w.similarity * similarity + w.full_text * full_text + w.recency * rec
    return Components(similarity, full_text, rec, distance, score)


def past_recall_gate(distance: float, gate: float) -> bool:
    """Whether an item is past the recall gate (HAKI_RECALL_MAX_DISTANCE): the gate is on (> 0)
    and the item's cosine distance to the query is above it."""
    return 0 < gate < distance


def best_neighbours(times: np.ndarray, scores: np.ndarray, window: float) -> np.ndarray:
    """For items sorted by time, the best score among the *other* items within `window` seconds
    of each (0 where none is, or where the best is below 0). O(n log n): range maxima from a
    sparse table, so a pool recorded all at once costs no more than a spread one."""
    n = len(times)
    if n == 0:
        return np.zeros(0)
    lo = np.searchsorted(times, times - window, "left")
    hi = np.searchsorted(times, times + window, "right")
    levels = [scores.astype(np.float64)]
    while (1 << len(levels)) <= n:
        prev, half = levels[-1], 1 << (len(levels) - 1)
        levels.append(np.maximum(prev[:-half], prev[half:]))
    index = np.arange(n)
    best: np.ndarray = np.maximum(_range_max(levels, lo, index), _range_max(levels, index + 1, hi))
    return np.maximum(best, 0.0)  # type: ignore[no-any-return]


def _range_max(levels: list[np.ndarray], start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """max(scores[start:end]) per query; -inf for an empty range."""
    out = np.full(len(start), -np.inf)
    width = end - start
    nonempty = width > 0
    j = np.zeros(len(start), dtype=np.int64)
    j[nonempty] = np.floor(np.log2(width[nonempty])).astype(np.int64)
    for level in np.unique(j[nonempty]):
        q = nonempty & (j == level)
        table = levels[level]
        out[q] = np.maximum(table[start[q]], table[end[q] - (1 << level)])
    return out
