"""Where an episode's candidate turns could come from: `python -m benchmarks.candidate_sources`.

A reranker can serve only the turns the candidate pool holds, and at a budget of 900 the pool
(the 64 turns nearest the question's vector and the 32 best by full text, docs/retrieval.md)
holds about 81% of LoCoMo dev's evidence turns. This harness rebuilds that pool outside the
server, from the same parts (the shipped MiniLM graph; PostgreSQL's `to_tsvector('english')`
lexemes ranked by the idf share the server's default full-text rank computes), and measures
the pool's recall and hit of the evidence turns (turns only, every dev question) for each way
of widening or steering it that needs no download:

- hierarchical candidates: windows of consecutive turns of a session embedded as their own
  vectors, the turns of the best windows added; or the sessions nearest the question (a
  session's vector the mean of its turns'), their best turns added;
- a turn's score smoothed by its neighbours' (the best window's score) when taking the top;
- pseudo-relevance feedback on the query vector (moved toward the mean of its nearest turns,
  then searched again) and on full text (the most telling lexemes of the best turns added
  to the query's);
- relative dates resolved ("yesterday" in a session of 8 May 2023 is 7 May 2023) and written
  into the text a turn's vector holds; and, for comparison, every turn's session date;
- a larger pool of today's parts, the size any of the above reaches, so a gain is told apart
  from a mere larger pool.

Each row gives the pool's mean size: a variant pays only where it beats today's parts at the
same size. Writes benchmarks/results/candidate-sources-<date>.json and .md (`--out DIR`).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import re
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np

from haki_context.core.context.scoring import best_neighbours
from haki_context.core.embedding.embedder import Encoder, HashingEncoder, OnnxMiniLMEncoder
from haki_context.db import embedded
from haki_context.settings import Settings

from .in_process import write_result
from .locomo import CATEGORIES, Conversation, Turn, add_data_argument, load_conversations

RESULTS = Path(__file__).resolve().parent / "results"
VECTOR_K = 64  # the server's episode candidates per axis at a budget of 900
TEXT_K = 32  # its full-text candidates
MAX_LEXEMES = 32  # most query lexemes searched (HAKI_MAX_QUERY_LEXEMES)

# --- relative dates


_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_COUNTS = {"a": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "a couple of": 2, "a few": 3}
_UNITS = {"day": 1, "week": 7, "month": 30, "year": 365}
_RELATIVE = re.compile(
    r"\b(yesterday|last night|today|tonight|this morning|tomorrow|last weekend|last week|next week|"
    r"last month|next month|last year|next year|last (?:" + "|".join(_WEEKDAYS) + r")|"
    r"(?:" + "|".join(_COUNTS) + r") (?:day|week|month|year)s? ago)\b",
    re.IGNORECASE,
)


def _month(d: datetime, step: int) -> str:
    month = d.month - 1 + step
    return datetime(d.year + month // 12, month % 12 + 1, 1, tzinfo=UTC).strftime("%B %Y")


def resolve(phrase: str, day: datetime) -> str:
    """The date (or span) a relative phrase said on `day` names."""
    p = phrase.lower()
    if p in ("yesterday", "last night"):
        return f"{day - timedelta(days=1):%d %B %Y}"
    if p in ("today", "tonight", "this morning"):
        return f"{day:%d %B %Y}"
    if p == "tomorrow":
        return f"{day + timedelta(days=1):%d %B %Y}"
    if p in ("last week", "last weekend"):
        return f"the week before {day:%d %B %Y}"
    if p == "next week":
        return f"the week after {day:%d %B %Y}"
    if p == "last month":
        return _month(day, -1)
    if p == "next month":
        return _month(day, 1)
    if p in ("last year", "next year"):
        return str(day.year + (-1 if p == "last year" else 1))
    if p.startswith("last "):
        target = _WEEKDAYS.index(p[5:])
        back = (day.weekday() - target) % 7 or 7
        return f"{day - timedelta(days=back):%A %d %B %Y}"
    count, unit = p.rsplit(" ", 2)[0], p.rsplit(" ", 2)[1].rstrip("s")
    days = _COUNTS[count] * _UNITS[unit]
    if unit in ("month", "year"):
        return _month(day, -_COUNTS[count] * (12 if unit == "year" else 1))
    return f"{day - timedelta(days=days):%d %B %Y}"


def with_dates(turn: Turn) -> str:
    """The turn's text, each relative date it says followed by the date it names."""
    found = list(dict.fromkeys(m.group(0) for m in _RELATIVE.finditer(turn.text)))
    if not found:
        return turn.text
    return turn.text + " (" + "; ".join(f"{p}: {resolve(p, turn.occurred_at)}" for p in found) + ")"


_QUESTION_WORDS = re.compile(
    r"^\s*(?:(?:when|what|where|who|whom|which|why|how(?: many| long| much| often)?)\s+)?"
    r"(?:(?:did|does|do|is|was|were|are|has|have|had|would|will|could|can|might)\s+)?",
    re.IGNORECASE,
)


def statement(question: str) -> str:
    """The question without its question word and auxiliary ("When did Caroline go ...?" ->
    "Caroline go ..."): what a turn that answers it would say."""
    return _QUESTION_WORDS.sub("", question, count=1).rstrip(" ?") or question


# --- one conversation's parts


@dataclass
class Parts:
    """One conversation's vectors and lexemes, and its questions'."""

    conv: Conversation
    turns: np.ndarray  # unit vectors, one per turn
    questions: np.ndarray
    lexemes: list[set[str]]  # per turn
    question_lexemes: list[list[str]]
    idf: dict[str, float]
    extra: dict[str, np.ndarray]  # other texts of the turns, by name, one vector per turn
    stripped: np.ndarray  # the questions' vectors without their question words (see `statement`)
    windows: dict[int, tuple[np.ndarray, list[list[int]]]]  # size -> vectors, their turns
    encode_s: dict[str, float]  # seconds to embed each text set of the turns, by name

    def full_text(self, lexemes: Sequence[str], k: int) -> list[int]:
        """The k turns holding the largest share of the lexemes' idf mass (the server's default rank)."""
        weights = {x: self.idf[x] for x in lexemes if x in self.idf}
        total = sum(weights.values())
        if not total:
            return []
        scores = [(sum(w for x, w in weights.items() if x in held) / total, i) for i, held in enumerate(self.lexemes)]
        ranked = sorted((s for s in scores if s[0] > 0), key=lambda s: (-s[0], s[1]))
        return [i for _, i in ranked[:k]]


def _windows(turns: list[Turn], size: int, stride: int) -> list[list[int]]:
    out: list[list[int]] = []
    start = 0
    while start < len(turns):
        session = turns[start].session
        members = [i for i in range(start, min(start + size, len(turns))) if turns[i].session == session]
        out.append(members)
        nxt = start + stride
        # A window never spans two sessions: the next one starts at the session's first turn.
        if nxt > members[-1] or (nxt < len(turns) and turns[nxt].session != session):
            nxt = members[-1] + 1
        start = nxt
    return out


async def _lexemes(conn: asyncpg.Connection, texts: list[str]) -> list[list[str]]:
    rows = await conn.fetch(
        "SELECT ord, tsvector_to_array(to_tsvector('english', t)) AS lx FROM unnest($1::text[]) WITH ORDINALITY u(t, ord)",
        texts,
    )
    by = {r["ord"]: list(r["lx"]) for r in rows}
    return [by[i + 1] for i in range(len(texts))]


async def _query_lexemes(conn: asyncpg.Connection, texts: list[str]) -> list[list[str]]:
    # The query's lexemes in the order they first appear (tsvector_to_array sorts them).
    rows = await conn.fetch(
        "SELECT ord, array(SELECT lexeme FROM unnest(to_tsvector('english', t)) x ORDER BY positions[1]) AS lx"
        " FROM unnest($1::text[]) WITH ORDINALITY u(t, ord)",
        texts,
    )
    by = {r["ord"]: list(r["lx"])[:MAX_LEXEMES] for r in rows}
    return [by[i + 1] for i in range(len(texts))]


async def build_parts(conversations: list[Conversation], encoder: Encoder, conn: asyncpg.Connection) -> list[Parts]:
    out: list[Parts] = []
    for conv in conversations:
        texts = [t.text for t in conv.turns]
        lexemes = [set(x) for x in await _lexemes(conn, texts)]
        df = Counter(x for held in lexemes for x in held)
        n = len(lexemes)
        idf = {x: math.log(1 + (n - d + 0.5) / (d + 0.5)) for x, d in df.items()}
        dated = [with_dates(t) for t in conv.turns]
        changed = [i for i, (a, b) in enumerate(zip(texts, dated)) if a != b]
        encode_s: dict[str, float] = {}
        started = time.perf_counter()
        turns = encoder.encode(texts)
        encode_s["the turns"] = time.perf_counter() - started
        resolved = turns.copy()
        if changed:
            resolved[changed] = encoder.encode([dated[i] for i in changed])
        extra = {
            "dates resolved": resolved,
            "session date + the turn": encoder.encode([f"[{t.occurred_at:%d %B %Y}] {t.text}" for t in conv.turns]),
        }
        windows: dict[int, tuple[np.ndarray, list[list[int]]]] = {}
        for size in (3, 6):
            members = _windows(conv.turns, size, max(1, size // 2))
            started = time.perf_counter()
            windows[size] = (encoder.encode(["\n".join(texts[i] for i in m) for m in members]), members)
            encode_s[f"windows of {size} turns"] = time.perf_counter() - started
            # The same windows, each vector the mean of its turns' (nothing more to embed).
            windows[-size] = (np.stack([_unit(turns[m].mean(axis=0)) for m in members]), members)
        out.append(
            Parts(
                conv=conv,
                turns=turns,
                questions=encoder.encode([q.question for q in conv.questions]),
                stripped=encoder.encode([statement(q.question) for q in conv.questions]),
                lexemes=lexemes,
                question_lexemes=await _query_lexemes(conn, [q.question for q in conv.questions]),
                idf=idf,
                extra=extra,
                windows=windows,
                encode_s=encode_s,
            )
        )
    return out


# --- the pools


def _top(scores: np.ndarray, k: int) -> list[int]:
    return [int(i) for i in np.argsort(-scores, kind="stable")[:k]]


def _unit(v: np.ndarray) -> np.ndarray:
    return v / (np.linalg.norm(v) or 1.0)


# A pool: from one conversation's parts and a question's index, the turns (indices) it holds.
Pool = Callable[[Parts, int], set[int]]


def today(vector_k: int = VECTOR_K, text_k: int = TEXT_K) -> Pool:
    def pool(p: Parts, qi: int) -> set[int]:
        return set(_top(p.turns @ p.questions[qi], vector_k)) | set(p.full_text(p.question_lexemes[qi], text_k))

    return pool


def other_text(name: str) -> Pool:
    def pool(p: Parts, qi: int) -> set[int]:
        return set(_top(p.extra[name] @ p.questions[qi], VECTOR_K)) | set(p.full_text(p.question_lexemes[qi], TEXT_K))

    return pool


def both_texts(name: str, extra_k: int) -> Pool:
    """Today's pool, and the extra_k nearest by a second vector per turn."""

    def pool(p: Parts, qi: int) -> set[int]:
        return today()(p, qi) | set(_top(p.extra[name] @ p.questions[qi], extra_k))

    return pool


def windows(size: int, n_windows: int) -> Pool:
    """Today's pool, and every turn of the n best windows of `size` turns."""

    def pool(p: Parts, qi: int) -> set[int]:
        vectors, members = p.windows[size]
        best = _top(vectors @ p.questions[qi], n_windows)
        return today()(p, qi) | {i for w in best for i in members[w]}

    return pool


def sessions(n_sessions: int, per_session: int) -> Pool:
    """Today's pool, and the per_session nearest turns of each of the n sessions nearest the question."""

    def pool(p: Parts, qi: int) -> set[int]:
        q = p.questions[qi]
        by: dict[int, list[int]] = {}
        for i, t in enumerate(p.conv.turns):
            by.setdefault(t.session, []).append(i)
        keys = list(by)
        centroids = np.stack([_unit(p.turns[by[s]].mean(axis=0)) for s in keys])
        out = today()(p, qi)
        for s in _top(centroids @ q, n_sessions):
            members = by[keys[s]]
            out |= {members[j] for j in _top(p.turns[members] @ q, per_session)}
        return out

    return pool


def smoothed(weight: float, n_windows: int = 0) -> Pool:
    """The vector top taken by a turn's cosine plus `weight` times its better neighbour's
    (and every turn of the n best 3-turn windows)."""

    def pool(p: Parts, qi: int) -> set[int]:
        s = p.turns @ p.questions[qi]
        turns = p.conv.turns
        left = np.array([s[i - 1] if i and turns[i - 1].session == t.session else -1.0 for i, t in enumerate(turns)])
        last = len(turns) - 1
        right = np.array(
            [s[i + 1] if i < last and turns[i + 1].session == t.session else -1.0 for i, t in enumerate(turns)]
        )
        score = s + weight * np.maximum(left, right)
        out = set(_top(score, VECTOR_K)) | set(p.full_text(p.question_lexemes[qi], TEXT_K))
        if n_windows:
            vectors, members = p.windows[3]
            out |= {i for w in _top(vectors @ p.questions[qi], n_windows) for i in members[w]}
        return out

    return pool


def vector_feedback(m: int, beta: float, second_k: int) -> Pool:
    """Today's pool, and the second_k nearest a query vector moved toward its m nearest turns
    (second_k = 0: the vector top taken by the moved vector instead)."""

    def pool(p: Parts, qi: int) -> set[int]:
        q = p.questions[qi]
        first = _top(p.turns @ q, m)
        moved = _unit(q + beta * p.turns[first].mean(axis=0))
        if not second_k:
            return set(_top(p.turns @ moved, VECTOR_K)) | set(p.full_text(p.question_lexemes[qi], TEXT_K))
        return today()(p, qi) | set(_top(p.turns @ moved, second_k))

    return pool


def text_feedback(m: int, n_terms: int, second_k: int) -> Pool:
    """Today's pool, and the second_k best by full text of the query's lexemes plus the n_terms
    lexemes of its m nearest turns with the most idf mass among them (the query's own excluded)."""

    def pool(p: Parts, qi: int) -> set[int]:
        q = p.questions[qi]
        own = p.question_lexemes[qi]
        first = _top(p.turns @ q, m)
        mass: dict[str, float] = {}
        for i in first:
            for x in p.lexemes[i]:
                if x not in own:
                    mass[x] = mass.get(x, 0.0) + p.idf[x]
        added = sorted(mass, key=lambda x: -mass[x])[:n_terms]
        return today()(p, qi) | set(p.full_text(own + added, second_k))

    return pool


# A ranking: from one conversation's parts, a question's index and a pool, its turns best first.
Ranking = Callable[[Parts, int, set[int]], list[int]]
SERVED = 22  # turns a 900-token packet holds (about 40 tokens a turn)
SERVER = Settings()  # the server's defaults: its weights and neighbour window
# The server's score divided by its similarity weight, so that similarity counts 1.
TEXT_WEIGHT = SERVER.weight_full_text / SERVER.weight_similarity
NEIGHBOUR_WEIGHT = SERVER.neighbour_weight / SERVER.weight_similarity


def _text_share(p: Parts, qi: int) -> np.ndarray:
    weights = {x: p.idf[x] for x in p.question_lexemes[qi] if x in p.idf}
    total = sum(weights.values()) or 1.0
    return np.array([sum(w for x, w in weights.items() if x in held) / total for held in p.lexemes])


def _with_neighbours(p: Parts, pool: set[int], score: np.ndarray) -> list[int]:
    """The pool best first by `score` plus the server's neighbour cue (`best_neighbours` over the
    turns' instants, the server's window and weight)."""
    members = sorted(pool, key=lambda i: p.conv.turns[i].occurred_at)
    times = np.array([p.conv.turns[i].occurred_at.timestamp() for i in members])
    best = best_neighbours(times, np.array([score[i] for i in members]), SERVER.neighbour_window_s)
    final = {i: score[i] + NEIGHBOUR_WEIGHT * b for i, b in zip(members, best.tolist())}
    return sorted(pool, key=lambda i: -final[i])


def plain(p: Parts, qi: int, pool: set[int]) -> list[int]:
    """The pool by similarity plus the weighted full-text share and the neighbour cue (the
    server's score; its speaker and date cues aside)."""
    score = p.turns @ p.questions[qi] + TEXT_WEIGHT * _text_share(p, qi)
    return _with_neighbours(p, pool, score)


def window_vectors(p: Parts, before: int, after: int) -> np.ndarray:
    """Per turn, the mean of its vector and those of up to `before` turns before it and `after`
    after it in its session, as a unit vector."""
    turns = p.conv.turns
    out = np.empty_like(p.turns)
    for i, t in enumerate(turns):
        lo, hi = i, i
        while lo > 0 and i - lo < before and turns[lo - 1].session == t.session:
            lo -= 1
        while hi < len(turns) - 1 and hi - i < after and turns[hi + 1].session == t.session:
            hi += 1
        out[i] = _unit(p.turns[lo : hi + 1].mean(axis=0))
    return out


def window_similarity(before: int, after: int, weight: float, blend: bool = False) -> Ranking:
    """As `plain`, the similarity raised by `weight` x the similarity of the turn's window (its
    mean vector with its neighbours'); `blend`: the two similarities' weighted mean instead."""

    def rank(p: Parts, qi: int, pool: set[int]) -> list[int]:
        sim = p.turns @ p.questions[qi]
        wsim = window_vectors(p, before, after) @ p.questions[qi]
        both = (sim + weight * wsim) / (1 + weight) if blend else sim + weight * wsim
        return _with_neighbours(p, pool, both + TEXT_WEIGHT * _text_share(p, qi))

    return rank


def with_window(size: int, weight: float) -> Ranking:
    """As `plain`, plus `weight` times the similarity of the best window holding the turn."""

    def rank(p: Parts, qi: int, pool: set[int]) -> list[int]:
        vectors, members = p.windows[size]
        sims = vectors @ p.questions[qi]
        best = np.full(len(p.conv.turns), -1.0)
        for w, m in enumerate(members):
            for i in m:
                best[i] = max(best[i], sims[w])
        score = p.turns @ p.questions[qi] + TEXT_WEIGHT * _text_share(p, qi) + weight * best
        return _with_neighbours(p, pool, score)

    return rank


def stripped_query(blend: float) -> tuple[Pool, Ranking]:
    """Today's pool and ranking, the query's vector the blend of the question's and the
    statement's (`statement`): 1.0 the statement's alone."""

    def vector(p: Parts, qi: int) -> np.ndarray:
        return _unit((1 - blend) * p.questions[qi] + blend * p.stripped[qi])

    def pool(p: Parts, qi: int) -> set[int]:
        return set(_top(p.turns @ vector(p, qi), VECTOR_K)) | set(p.full_text(p.question_lexemes[qi], TEXT_K))

    def rank(p: Parts, qi: int, held: set[int]) -> list[int]:
        return _with_neighbours(p, held, p.turns @ vector(p, qi) + TEXT_WEIGHT * _text_share(p, qi))

    return pool, rank


def variants() -> dict[str, Pool | tuple[Pool, Ranking]]:
    """Every pool measured, by name; today's first."""
    out: dict[str, Pool | tuple[Pool, Ranking]] = {"today: vector 64 + text 32": today()}
    for vk, tk in ((80, 32), (96, 32), (64, 64), (128, 32), (128, 64)):
        out[f"today's parts, vector {vk} + text {tk}"] = today(vk, tk)
    out["hierarchical: + turns of the 4 best 3-turn windows"] = windows(3, 4)
    out["hierarchical: + turns of the 8 best 3-turn windows"] = windows(3, 8)
    out["hierarchical: + turns of the 4 best 6-turn windows"] = windows(6, 4)
    out["hierarchical, mean vectors: + turns of the 4 best 3-turn windows"] = windows(-3, 4)
    out["hierarchical, mean vectors: + turns of the 4 best 6-turn windows"] = windows(-6, 4)
    out["hierarchical, mean vectors: + turns of the 16 best 3-turn windows"] = windows(-3, 16)
    out["hierarchical: + 8 best turns of the 2 nearest sessions"] = sessions(2, 8)
    out["hierarchical: + 4 best turns of the 4 nearest sessions"] = sessions(4, 4)
    out["neighbours: cosine + 0.3 x the better neighbour's"] = smoothed(0.3)
    out["neighbours: cosine + 0.6 x the better neighbour's"] = smoothed(0.6)
    out["neighbours: cosine + 1.0 x the better neighbour's"] = smoothed(1.0)
    out["neighbours 0.6 and the turns of the 4 best 3-turn windows"] = smoothed(0.6, 4)
    out["hierarchical: + turns of the 16 best 3-turn windows"] = windows(3, 16)
    out["vector feedback: top 64 of q + 0.5 x mean(3 nearest) instead"] = vector_feedback(3, 0.5, 0)
    out["vector feedback: + 16 nearest q + 0.5 x mean(3 nearest)"] = vector_feedback(3, 0.5, 16)
    out["vector feedback: + 32 nearest q + 1.0 x mean(5 nearest)"] = vector_feedback(5, 1.0, 32)
    out["text feedback: + 16 best with 5 lexemes of the 3 nearest"] = text_feedback(3, 5, 16)
    out["text feedback: + 32 best with 10 lexemes of the 5 nearest"] = text_feedback(5, 10, 32)
    out["turn text: relative dates resolved (instead)"] = other_text("dates resolved")
    out["turn text: session date + the turn (instead)"] = other_text("session date + the turn")
    out["two vectors: + 16 nearest by the session-dated text"] = both_texts("session date + the turn", 16)
    out["windows of 3 (4 best); ranked + 0.5 x the best window's similarity"] = (windows(3, 4), with_window(3, 0.5))
    out["windows of 3 (4 best); ranked + 1.0 x the best window's similarity"] = (windows(3, 4), with_window(3, 1.0))
    out["windows of 6 (4 best); ranked + 0.5 x the best window's similarity"] = (windows(6, 4), with_window(6, 0.5))
    out["mean windows of 3 (4 best); ranked + 0.5 x the best window's"] = (windows(-3, 4), with_window(-3, 0.5))
    out["today's pool; ranked + 0.5 x the best 3-window's similarity"] = (today(), with_window(3, 0.5))
    out["today's pool; ranked + 0.5 x the best mean 3-window's similarity"] = (today(), with_window(-3, 0.5))
    for before, after in ((2, 0), (1, 1), (1, 0), (3, 0)):
        for weight in (0.5, 1.0):
            out[f"today's pool; similarity + {weight} x its window's ({before} before, {after} after)"] = (
                today(),
                window_similarity(before, after, weight),
            )
    out["query without its question words"] = stripped_query(1.0)
    out["query: the question's and the statement's vectors 1:1"] = stripped_query(0.5)
    out["today's pool; similarity blended 1:1 with its window's (2 before)"] = (
        today(),
        window_similarity(2, 0, 1.0, blend=True),
    )
    return out


def measure(parts: list[Parts]) -> dict[str, dict[str, Any]]:
    """Each pool's recall and hit of the evidence turns, overall and per category, and its size."""
    results: dict[str, dict[str, Any]] = {}
    for name, variant in variants().items():
        pool, rank = variant if isinstance(variant, tuple) else (variant, plain)
        sums: dict[int, list[int]] = {c: [0, 0, 0, 0] for c in CATEGORIES}
        size = served_found = served_hit = 0
        for p in parts:
            index = {t.dia_id: i for i, t in enumerate(p.conv.turns)}
            for qi, q in enumerate(p.conv.questions):
                held = pool(p, qi)
                evidence = {index[e] for e in q.evidence}
                row = sums[q.category]
                row[0] += len(evidence & held)
                row[1] += len(evidence)
                row[2] += bool(evidence & held)
                row[3] += 1
                size += len(held)
                served = set(rank(p, qi, held)[:SERVED])
                served_found += len(evidence & served)
                served_hit += bool(evidence & served)
        total = [sum(r[i] for r in sums.values()) for i in range(4)]
        results[name] = {
            "recall": round(total[0] / total[1], 4),
            "hit": round(total[2] / total[3], 4),
            "pool_turns": round(size / total[3], 1),
            "served_recall": round(served_found / total[1], 4),
            "served_hit": round(served_hit / total[3], 4),
            "categories": {CATEGORIES[c]: round(r[0] / r[1], 4) for c, r in sums.items() if r[1]},
        }
    return results


def markdown(report: dict[str, Any]) -> str:
    names = list(CATEGORIES.values())
    lines = [
        f"# Candidate sources: the episode pool's ceiling at a budget of 900 ({report['date']})",
        "",
        f"LoCoMo {', '.join(report['conversations'])}: {report['questions']} questions, {report['turns']} turns "
        f"({report['turns_with_relative_dates']} say a relative date). Embedder: {report['embedder']}. "
        "Recall / hit of the evidence turns in the pool (what a perfect reranker would serve), "
        "the pool's mean size, and recall per category.",
        "",
        "Seconds to embed the turns' texts (the shipped graph on 2 threads; a window holds 3 or 6 turns): "
        + ", ".join(f"{name} {s:.1f}" for name, s in report["encode_s"].items())
        + ".",
        "",
        "| pool | recall / hit | turns | " + " | ".join(names) + f" | best {SERVED} recall / hit |",
        "|---|---:|---:|" + "---:|" * len(names) + "---:|",
    ]
    for name, r in report["results"].items():
        cats = " | ".join(f"{r['categories'].get(c, 0):.3f}" for c in names)
        lines.append(
            f"| {name} | {r['recall']:.3f} / {r['hit']:.3f} | {r['pool_turns']:.1f} | {cats} | "
            f"{r['served_recall']:.3f} / {r['served_hit']:.3f} |"
        )
    return "\n".join(lines) + "\n"


async def run(conversations: list[Conversation], encoder: Encoder) -> list[Parts]:
    tmp = Path(tempfile.mkdtemp(prefix="haki-sources-"))
    server = await asyncio.to_thread(embedded.start, tmp / "data")
    try:
        conn = await asyncpg.connect(server.uri)
        try:
            return await build_parts(conversations, encoder, conn)
        finally:
            await conn.close()
    finally:
        server.close()
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.candidate_sources",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_data_argument(parser)
    parser.add_argument("--conversations", help="comma-separated conversation ids (default: all)")
    parser.add_argument("--embedder", choices=["onnx", "hashing"], default="onnx")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    conversations = load_conversations(args.data, args.conversations.split(",") if args.conversations else None)
    encoder: Encoder = OnnxMiniLMEncoder.shipped(threads=2) if args.embedder == "onnx" else HashingEncoder()
    started = time.perf_counter()
    parts = asyncio.run(run(conversations, encoder))
    report = {
        "date": datetime.now(UTC).date().isoformat(),
        "conversations": [c.id for c in conversations],
        "questions": sum(len(c.questions) for c in conversations),
        "turns": sum(len(c.turns) for c in conversations),
        "turns_with_relative_dates": sum(1 for c in conversations for t in c.turns if _RELATIVE.search(t.text)),
        "embedder": encoder.name,
        "results": measure(parts),
        "encode_s": {name: round(sum(p.encode_s[name] for p in parts), 1) for name in parts[0].encode_s},
        "wall_s": round(time.perf_counter() - started, 1),
    }
    write_result(args.out, "candidate-sources", report, markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
