"""Entities for the one-hop expansion (docs/design.md "The `context` pipeline", step 8): rule-based, no NER, no model."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

ENTITY = re.compile(r"[A-ZÀ-Ý][a-zà-ÿ]{2,}")
_WORD = re.compile(r"\w+", re.UNICODE)

# Capitalised only because they start a sentence.
SENTENCE_STARTERS = frozenset(
    [
        "the",
        "this",
        "that",
        "these",
        "those",
        "there",
        "here",
        "and",
        "with",
        "when",
        "where",
        "what",
        "which",
        "who",
        "le",
        "la",
        "les",
        "un",
        "une",
        "des",
        "ce",
        "cette",
        "ces",
        "et",
        "avec",
    ]
)


def query_words(query: str) -> frozenset[str]:
    """The words of a query, lower-cased."""
    return frozenset(w.lower() for w in _WORD.findall(query))


def names(speaker: str, words: frozenset[str]) -> bool:
    """True when every word of `speaker` is a word of the query (case-insensitively)."""
    parts = [w.lower() for w in _WORD.findall(speaker)]
    return bool(parts) and all(p in words for p in parts)


def entities(texts: Iterable[str], query: str, limit: int) -> list[str]:
    """Capitalised tokens of `texts`, most frequent first (then alphabetical),
    minus sentence starters and words of the query (case-insensitively)."""
    in_query = query_words(query)
    counts = Counter(m for text in texts for m in ENTITY.findall(text))
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    chosen: list[str] = []
    for word, _ in ranked:
        low = word.lower()
        if low in SENTENCE_STARTERS or low in in_query:
            continue
        chosen.append(word)
        if len(chosen) == limit:
            break
    return chosen
