"""benchmarks/learned_ranking.py: the logistic regression learns which components tell evidence,
and a greedy pack serves the best candidates that fit the budget."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))  # benchmarks/ is a folder of the repository, not an installed package

from benchmarks import learned_ranking  # noqa: E402
from benchmarks.learned_ranking import Candidate  # noqa: E402


def test_the_fitted_model_ranks_by_the_component_that_tells_the_classes_apart() -> None:
    rng = np.random.default_rng(7)
    x = rng.normal(size=(400, 3))
    y = (x[:, 1] + 0.1 * rng.normal(size=400) > 0.5).astype(float)  # only the second column tells
    logit = learned_ranking.fit(x, y)
    probe = np.array([[0.0, 2.0, 0.0], [0.0, -2.0, 0.0], [5.0, 0.0, 5.0]])
    scores = logit(probe)
    assert scores[0] > 0 > scores[1] and scores[0] > scores[2]


def test_a_greedy_pack_skips_what_does_not_fit_and_takes_what_still_does() -> None:
    def candidate(tokens: int, turn: str | None) -> Candidate:
        return Candidate(0.5, 0.0, 0.0, 0.4, tokens, False, turn)

    candidates = [candidate(600, "D1:1"), candidate(400, "D1:2"), candidate(300, "D1:3"), candidate(5, None)]
    assert learned_ranking.packed([0, 1, 2, 3], candidates) == {"D1:1", "D1:3"}
