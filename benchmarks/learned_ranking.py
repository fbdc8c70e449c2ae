"""Would a ranking learned from the trace's score components serve more evidence? `python -m benchmarks.learned_ranking`.

The server ranks episode candidates by a hand-set score (0.8 x similarity + 0.6 x full text +
0.15 x recency, plus the speaker, date and neighbour cues; docs/retrieval.md). This harness asks
`context` for every LoCoMo dev question (turns only, mode "a" of benchmarks/quality.py) at a
budget of 900 with a pool of `--pool` episode candidates per axis (the server keeps 64), reads
each call's trace (every candidate with its components, tokens and decision), and fits a
logistic regression that predicts "this candidate is an evidence turn" from the components
(similarity, full text, recency, the cues' share, and a few products and transforms of them),
leave-one-conversation-out: each conversation is ranked by the model fitted on the others. It
then packs the budget greedily, best first, from the same pool by each ranking and compares the
evidence served: the server's score, the learned probability, and the learned probability per
token. No coefficients are shipped from here: it says whether a learned ranking would pay.
Writes benchmarks/results/learned-ranking-<date>.json and .md (`--out DIR`).
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from haki_context.settings import Settings

from .in_process import write_result
from .locomo import add_data_argument, load_conversations
from .quality import Client, Config, build_settings, ingest, open_server

RESULTS = Path(__file__).resolve().parent / "results"
BUDGET = 900
TRACE_QUERY = """
query($s: String!, $q: String!, $b: Int) {
  context(subjectId: $s, query: $q, budget: $b) {
    trace { decisions(itemKind: EPISODE) { itemId chunk decision similarity fullText recency score tokens } }
  }
}
"""
# The server's weights of similarity, full text and recency (its defaults): what the score
# holds beyond them is the cues' share.
SERVER = Settings()


@dataclass(frozen=True)
class Candidate:
    similarity: float
    full_text: float
    recency: float
    score: float
    tokens: int
    evidence: bool
    turn: str | None


@dataclass(frozen=True)
class Asked:
    conversation: str
    evidence: frozenset[str]
    candidates: list[Candidate]


async def collect(data_dir: Path, pool: int, limit: int | None) -> list[Asked]:
    """Every question's episode candidates, as its call's trace records them."""
    conversations = load_conversations(data_dir)
    if limit is not None:
        for conv in conversations:
            conv.questions = conv.questions[:limit]
    base = build_settings(None, {"episode_top_k": str(pool), "episode_max_k": str(pool)})
    out: list[Asked] = []
    n_questions = sum(len(c.questions) for c in conversations)
    async with open_server(Config(data_dir=data_dir), base, n_questions) as (rt, _encoder):
        client = Client(rt)
        try:
            run_id = uuid.uuid4().hex[:8]
            for conv in conversations:
                ingested = await ingest(client, conv, "a", run_id, base.episode_excerpt_chars)
                for q in conv.questions:
                    data = await client.execute(TRACE_QUERY, {"s": ingested.subject, "q": q.question, "b": BUDGET})
                    candidates = []
                    for d in data["context"]["trace"]["decisions"]:
                        turns = ingested.chunk_turns.get(str(d["itemId"]), ())
                        chunk = d["chunk"] or 0
                        turn = turns[chunk] if 0 <= chunk < len(turns) else None
                        candidates.append(
                            Candidate(
                                similarity=d["similarity"] or 0.0,
                                full_text=d["fullText"] or 0.0,
                                recency=d["recency"] or 0.0,
                                score=d["score"] or 0.0,
                                tokens=d["tokens"],
                                evidence=turn in q.evidence,
                                turn=turn,
                            )
                        )
                    out.append(Asked(conv.id, frozenset(q.evidence), candidates))
        finally:
            await client.aclose()
    return out


def features(c: Candidate) -> list[float]:
    """The components a learned ranking sees."""
    weighted = SERVER.weight_similarity * c.similarity + SERVER.weight_full_text * c.full_text
    cues = c.score - (weighted + SERVER.weight_recency * c.recency)
    return [
        c.similarity,
        c.full_text,
        c.recency,
        cues,
        c.similarity * c.full_text,
        float(c.full_text > 0),
        float(np.log(max(c.tokens, 1))),
        c.similarity**2,
    ]


def fit(x: np.ndarray, y: np.ndarray, l2: float = 1e-3, iterations: int = 50) -> Callable[[np.ndarray], np.ndarray]:
    """A logistic regression by Newton's method on standardised features; returns its logit."""
    mean, sd = x.mean(0), x.std(0) + 1e-9
    z = np.hstack([(x - mean) / sd, np.ones((len(x), 1))])
    w = np.zeros(z.shape[1])
    for _ in range(iterations):
        p = 1 / (1 + np.exp(-z @ w))
        gradient = z.T @ (p - y) + l2 * w
        hessian = (z * (p * (1 - p))[:, None]).T @ z + l2 * np.eye(len(w))
        w -= np.linalg.solve(hessian, gradient)
    return lambda x2: np.hstack([(x2 - mean) / sd, np.ones((len(x2), 1))]) @ w


def packed(order: Sequence[int], candidates: list[Candidate]) -> set[str]:
    """The turns a greedy pack of the budget serves, best first."""
    left, served = BUDGET, set[str]()
    for i in order:
        if candidates[i].tokens <= left:
            left -= candidates[i].tokens
            turn = candidates[i].turn
            if turn is not None:
                served.add(turn)
    return served


def served_figures(asked: list[Asked], orders: list[list[int]]) -> dict[str, float]:
    found = total = hits = 0
    for a, order in zip(asked, orders):
        got = len(a.evidence & packed(order, a.candidates))
        found, total, hits = found + got, total + len(a.evidence), hits + (got > 0)
    return {"recall": round(found / total, 4), "hit": round(hits / len(asked), 4)}


def measure(asked: list[Asked], server_pool: int) -> dict[str, dict[str, float]]:
    """Recall and hit of each ranking's greedy pack, the learned ones fitted leave-one-conversation-out."""
    logits: list[np.ndarray] = [np.zeros(0)] * len(asked)
    for held in sorted({a.conversation for a in asked}):
        train = [a for a in asked if a.conversation != held]
        x = np.array([features(c) for a in train for c in a.candidates])
        y = np.array([float(c.evidence) for a in train for c in a.candidates])
        model = fit(x, y)
        for i, a in enumerate(asked):
            if a.conversation == held and a.candidates:
                logits[i] = model(np.array([features(c) for c in a.candidates]))

    def by(key: Callable[[int, int], float], top: int | None = None) -> list[list[int]]:
        orders = []
        for ai, a in enumerate(asked):
            indices = sorted(range(len(a.candidates)), key=lambda i: -a.candidates[i].score)[:top]
            orders.append(sorted(indices, key=lambda i: -key(ai, i)))
        return orders

    server = lambda ai, i: asked[ai].candidates[i].score  # noqa: E731
    learned = lambda ai, i: float(logits[ai][i])  # noqa: E731

    def per_token(ai: int, i: int) -> float:
        return float(1 / (1 + np.exp(-logits[ai][i])) / asked[ai].candidates[i].tokens)

    return {
        "the server's score, the whole pool": served_figures(asked, by(server)),
        f"the server's score, its {server_pool} best-scored": served_figures(asked, by(server, server_pool)),
        "learned, the whole pool": served_figures(asked, by(learned)),
        f"learned, the server's best {server_pool}": served_figures(asked, by(learned, server_pool)),
        "learned probability per token, the whole pool": served_figures(asked, by(per_token)),
    }


def markdown(report: dict[str, Any]) -> str:
    lines = [
        f"# Learned ranking of episode candidates ({report['date']})",
        "",
        f"LoCoMo dev, turns only: {report['questions']} questions at a budget of {BUDGET}, "
        f"{report['candidates_per_question']:.0f} episode candidates each (a pool of {report['pool']} per axis). "
        "Logistic regression on the trace's components, leave-one-conversation-out; each ranking packs "
        "the budget greedily, best first.",
        "",
        "| ranking | recall | hit |",
        "|---|---:|---:|",
    ]
    lines += [f"| {name} | {r['recall']:.3f} | {r['hit']:.3f} |" for name, r in report["results"].items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.learned_ranking",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_data_argument(parser)
    parser.add_argument("--pool", type=int, default=256, help="episode candidates per axis (the server keeps 64)")
    parser.add_argument("--limit-questions", type=int, default=None, help="per conversation (a smoke run)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    asked = asyncio.run(collect(args.data, args.pool, args.limit_questions))
    report = {
        "date": datetime.now(UTC).date().isoformat(),
        "questions": len(asked),
        "pool": args.pool,
        "candidates_per_question": float(np.mean([len(a.candidates) for a in asked])),
        "results": measure(asked, 64),
        "wall_s": round(time.perf_counter() - started, 1),
    }
    write_result(args.out, "learned-ranking", report, markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
