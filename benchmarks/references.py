"""Reference retrievers the server is compared with, over the same turn texts.

- BM25: rank_bm25.BM25Okapi over a simple tokenisation (lowercase, runs of
  letters and digits), with English stop words removed or kept (a setting of
  the harness, written in every report);
- dense: cosine similarity with the same embedder as the server (vectors
  computed once per conversation);
- RRF: textbook reciprocal-rank fusion of the two, each turn scored
  `1/(60 + rank in BM25) + 1/(60 + rank in dense)` (ranks from 1, over every
  turn; a question with no BM25 word is ranked by dense alone).

Both return the top k turns of a conversation for a question, best first,
ties broken by turn order, so a run is deterministic.
"""

from __future__ import annotations

import re

import numpy as np
from rank_bm25 import BM25Okapi

_WORD = re.compile(r"[a-z0-9]+")

# A short English stop-word list (function words only), so that BM25 is not
# scored on "what", "did", "the"... of whole questions.
STOP_WORDS = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "itself",
        "just",
        "me",
        "more",
        "most",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "s",
        "t",
        "ll",
        "ve",
        "re",
        "d",
        "m",
    ]
)


def tokenize(text: str, stop_words: bool) -> list[str]:
    """Lowercase word tokens; English stop words dropped when `stop_words` is True."""
    words = _WORD.findall(text.lower())
    if stop_words:
        words = [w for w in words if w not in STOP_WORDS]
    return words


def _top(scores: np.ndarray, k: int) -> list[int]:
    if k <= 0:
        return []
    order = np.lexsort((np.arange(len(scores)), -scores))  # by score desc, then index
    return [int(i) for i in order[:k]]


class BM25Reference:
    def __init__(self, texts: list[str], *, remove_stop_words: bool) -> None:
        self.remove_stop_words = remove_stop_words
        self._bm25 = BM25Okapi([tokenize(t, remove_stop_words) or ["\x00"] for t in texts])

    def scores(self, query: str) -> np.ndarray:
        words = tokenize(query, self.remove_stop_words)
        if not words:
            return np.zeros(len(self._bm25.doc_len), dtype=np.float64)
        return np.asarray(self._bm25.get_scores(words), dtype=np.float64)

    def top(self, query: str, k: int) -> list[int]:
        if not tokenize(query, self.remove_stop_words):
            return []
        return _top(self.scores(query), k)


class DenseReference:
    def __init__(self, vectors: np.ndarray) -> None:
        self._vectors = np.asarray(vectors, dtype=np.float32)

    def scores(self, query_vector: np.ndarray) -> np.ndarray:
        return (self._vectors @ np.asarray(query_vector, dtype=np.float32)).astype(np.float64)

    def top(self, query_vector: np.ndarray, k: int) -> list[int]:
        return _top(self.scores(query_vector), k)


RRF_K = 60  # the constant of Cormack et al.'s reciprocal-rank fusion


class RRFReference:
    """Reciprocal-rank fusion of a BM25 and a dense reference over the same turns."""

    def __init__(self, bm25: BM25Reference, dense: DenseReference, k: int = RRF_K) -> None:
        self._bm25 = bm25
        self._dense = dense
        self._k = k

    def top(self, query: str, query_vector: np.ndarray, k: int) -> list[int]:
        dense_scores = self._dense.scores(query_vector)
        fused = np.zeros(len(dense_scores), dtype=np.float64)
        rankings = [dense_scores]
        if tokenize(query, self._bm25.remove_stop_words):
            rankings.append(self._bm25.scores(query))
        for scores in rankings:
            order = _top(scores, len(scores))
            fused[order] += 1.0 / (self._k + np.arange(1, len(order) + 1))
        return _top(fused, k)
