"""What-if ranking of episode candidates, offline: `python -m benchmarks.rerank DUMP.json`.

Input: a candidates dump of the quality harness run so that the trace holds
every chunk of the subject with its similarity, ts_rank_cd and tokens:

    python -m benchmarks.quality --label dump-all --set episode_top_k=1000 \\
        --budgets 900 --dump-candidates /tmp/candidates.json

It then replays the assembler's episode step (DESIGN.md step 9) for ranking
rules the server does not have yet, with the same candidate pools (vector
top-k by similarity, union full-text top-k by ts_rank_cd among matching
chunks), cut at `episode_top_k`, packed by tokens into the budget, and
reports recall / hit beside BM25 and dense at the same k. Two token costs:
`trace` (the served line, as the trace records it) and `compact` (the line
`- [YYYY-MM-DD HH:MM] <speaker>: <text>` that a turn-text excerpt would give).
Recency is left out (its component is ~0 on LoCoMo's 2022-2023 dates).
The replay of the seed's rules is checked against the harness's own runs.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from .locomo import CATEGORIES, load_conversations
from .quality import DEFAULT_DATA

Scorer = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Rule:
    name: str
    top_k: int  # vector candidates, and the cut after ranking (episode_top_k)
    text_k: int  # full-text candidates (0 = none)
    score: Scorer  # (similarity, full_text, bm25, speaker_named) of the pool -> score
    tokens: str = "trace"  # or "compact"
    speaker_pool: bool = False  # candidates only among turns of the speaker the question names (when one is)


def _minmax(x: np.ndarray) -> np.ndarray:
    lo, hi = float(x.min()), float(x.max())
    return np.zeros_like(x) if hi <= lo else (x - lo) / (hi - lo)


def _ranks(x: np.ndarray) -> np.ndarray:
    order = np.argsort(-x, kind="stable")
    ranks = np.empty(len(x), dtype=np.float64)
    ranks[order] = np.arange(1, len(x) + 1)
    return ranks


def speaker_boost(inner: Scorer, w: float) -> Scorer:
    """`inner` plus `w` for a turn whose speaker the question names (speaker names as entities)."""
    return lambda sim, ft, bm, named: inner(sim, ft, bm, named) + w * named


def cosine(sim, ft, bm, _t):
    return sim


def hybrid(ws: float, wf: float) -> Scorer:
    return lambda sim, ft, bm, _t: ws * sim + wf * ft


def minmax(ws: float, wf: float, lexical: str = "ft") -> Scorer:
    def score(sim, ft, bm, _t):
        lex = ft if lexical == "ft" else bm
        return ws * _minmax(sim) + wf * _minmax(lex)

    return score


def rrf(c: float = 60.0, lexical: str = "ft", w_lex: float = 1.0) -> Scorer:
    def score(sim, ft, bm, _t):
        lex = ft if lexical == "ft" else bm
        lex_part = np.where(lex > 0, 1.0 / (c + _ranks(lex)), 0.0)
        return 1.0 / (c + _ranks(sim)) + w_lex * lex_part

    return score


def _pack(order: list[int], costs: np.ndarray, budget: int) -> list[int]:
    kept, left = [], budget
    for i in order:
        if costs[i] <= left:
            kept.append(i)
            left -= int(costs[i])
    return kept


def evaluate(
    rule: Rule,
    rows: list[dict[str, Any]],
    budgets: list[int],
    compact: dict[tuple[str, str], dict[str, int]],
    speakers: dict[tuple[str, str], str],
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for budget in budgets:
        found = {r: [] for r in ("server", "bm25", "dense")}
        ks, n_ev, cats = [], [], []
        for q in rows:
            ids = [c[0] for c in q["candidates"]]
            sim = np.array([c[1] for c in q["candidates"]], dtype=np.float64)
            ft = np.array([c[2] for c in q["candidates"]], dtype=np.float64)
            bm_by_id = dict(zip(q["turn_ids"], q["bm25_all"]))
            bm = np.array([bm_by_id.get(i, 0.0) for i in ids], dtype=np.float64)
            if rule.tokens == "compact":
                costs = np.array([compact[(q["conversation"], q["mode"])][i] for i in ids])
            else:
                costs = np.array([c[3] for c in q["candidates"]])
            named = np.array([speakers[(q["conversation"], i)] in q["named"] for i in ids], dtype=np.float64)
            allowed = np.arange(len(ids))
            if rule.speaker_pool and len(q["named"]) == 1:
                allowed = np.flatnonzero(named > 0)
            by_sim = allowed[np.argsort(-sim[allowed], kind="stable")][: rule.top_k].tolist()
            pool = set(by_sim)
            if rule.text_k:
                matching = allowed[ft[allowed] > 0]
                pool |= set(matching[np.argsort(-ft[matching], kind="stable")][: rule.text_k].tolist())
            idx = np.array(sorted(pool))
            scores = rule.score(sim[idx], ft[idx], bm[idx], named[idx])
            ranked = [int(idx[j]) for j in np.lexsort((idx, -scores))][: rule.top_k]
            kept = _pack(ranked, costs, budget)
            served = list(dict.fromkeys(ids[i] for i in kept))
            k = len(served)
            ev = set(q["evidence"])
            dense = list(dict.fromkeys(ids[i] for i in np.argsort(-sim, kind="stable")))[:k]
            bm25 = [d for d, _ in sorted(zip(q["turn_ids"], q["bm25_all"]), key=lambda p: -p[1])][:k]
            for name, got in (("server", served), ("bm25", bm25), ("dense", dense)):
                found[name].append(len(ev & set(got)))
            ks.append(k)
            n_ev.append(len(ev))
            cats.append(q["category"])
        res: dict[str, Any] = {"k_mean": round(float(np.mean(ks)), 2)}
        for name, f in found.items():
            res[name] = {
                "recall": round(sum(f) / sum(n_ev), 4),
                "hit": round(sum(x > 0 for x in f) / len(f), 4),
            }
            res[name]["by_category"] = {
                str(c): round(
                    sum(x for x, cc in zip(f, cats) if cc == c)
                    / max(1, sum(e for e, cc in zip(n_ev, cats) if cc == c)),
                    3,
                )
                for c in CATEGORIES
            }
        out[str(budget)] = res
    return out


def default_rules() -> list[Rule]:
    rules = [
        Rule("seed: cosine k8", 8, 0, cosine),
        Rule("cosine k64", 64, 0, cosine),
        Rule("hybrid .6/.25 k64 t64", 64, 64, hybrid(0.6, 0.25)),
        Rule("hybrid .6/1 k64 t64", 64, 64, hybrid(0.6, 1.0)),
        Rule("minmax .5/.5 k64 t64", 64, 64, minmax(0.5, 0.5)),
        Rule("minmax .6/.4 k64 t64", 64, 64, minmax(0.6, 0.4)),
        Rule("rrf60 k64 t64", 64, 64, rrf(60)),
        Rule("minmax .5/.5 bm25 k64 t64", 64, 64, minmax(0.5, 0.5, "bm25")),
        Rule("rrf60 bm25 k64 t64", 64, 64, rrf(60, "bm25")),
    ]
    mm = minmax(0.5, 0.5)
    rules += [
        Rule("minmax .5/.5 +speaker .1 k64 t64", 64, 64, speaker_boost(mm, 0.1)),
        Rule("minmax .5/.5 +speaker .2 k64 t64", 64, 64, speaker_boost(mm, 0.2)),
        Rule("minmax .5/.5 +speaker .3 k64 t64", 64, 64, speaker_boost(mm, 0.3)),
        Rule("minmax .5/.5 speaker pool k64 t64", 64, 64, mm, speaker_pool=True),
        Rule("hybrid .6/1 speaker pool k64 t64", 64, 64, hybrid(0.6, 1.0), speaker_pool=True),
    ]
    rules += [Rule(r.name + " compact", r.top_k, r.text_k, r.score, "compact", r.speaker_pool) for r in rules[1:]]
    return rules


def compact_costs(data_dir: Path, conv_ids: list[str]) -> dict[tuple[str, str], dict[str, int]]:
    """Tokens of `- [YYYY-MM-DD HH:MM] <turn text>` per turn, per (conversation, mode)."""
    out: dict[tuple[str, str], dict[str, int]] = {}
    for conv in load_conversations(data_dir, conv_ids):
        for mode in ("a", "b"):
            costs = {}
            for t in conv.turns:
                at = t.occurred_at if mode == "a" else conv.sessions[t.session]
                costs[t.dia_id] = max(1, len(f"- [{at.strftime('%Y-%m-%d %H:%M')}] {t.text}") // 4)
            out[(conv.id, mode)] = costs
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.rerank", description=__doc__.split("\n\n")[0])
    p.add_argument("dump", type=Path)
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    p.add_argument("--budgets", default="900,2000")
    p.add_argument("--modes", default="a,b")
    p.add_argument("--json", type=Path, help="also write the figures here")
    a = p.parse_args(argv)
    dump = orjson.loads(a.dump.read_bytes())
    rows = dump["questions"]
    convs = {c.id: c for c in load_conversations(a.data, sorted({q["conversation"] for q in rows}))}
    speakers: dict[tuple[str, str], str] = {}
    for conv in convs.values():
        for t in conv.turns:
            speakers[(conv.id, t.dia_id)] = t.payload["speaker"]
    for q in rows:
        conv = convs[q["conversation"]]
        q["turn_ids"] = [t.dia_id for t in conv.turns]
        words = set(re.findall(r"[a-z]+", q["question"].lower()))
        q["named"] = {s for s in conv.speakers if s.lower().split()[0] in words}
    compact = compact_costs(a.data, list(convs))
    budgets = [int(b) for b in a.budgets.split(",")]
    figures: dict[str, Any] = {}
    print("| rule | mode | budget | server R / H | BM25 R / H | dense R / H | k |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for rule in default_rules():
        for mode in a.modes.split(","):
            res = evaluate(rule, [q for q in rows if q["mode"] == mode], budgets, compact, speakers)
            figures[f"{rule.name} / {mode}"] = res
            for b, r in res.items():
                cells = " | ".join(f"{r[x]['recall']:.3f} / {r[x]['hit']:.3f}" for x in ("server", "bm25", "dense"))
                print(f"| {rule.name} | {mode} | {b} | {cells} | {r['k_mean']:.1f} |", flush=True)
    if a.json:
        a.json.write_bytes(orjson.dumps(figures, option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
