"""Which text of a turn its vector should hold: `python -m benchmarks.turn_texts`.

A conversation turn is embedded as its own words (`"<speaker>: <text>"`, docs/design.md
"Texts"), so a short reply ("Yes, last Tuesday!") says little by itself. This harness embeds
every LoCoMo dev turn in several texts that situate it, and measures dense retrieval alone:
for each question, the recall and hit of its evidence turns among the k turns nearest the
question (k = 10, 32, 64, 128; the server keeps 64 episode candidates at a budget of 900).
No server is involved: it says whether a text is worth storing a vector for before any
schema or re-embedding is built for it.

Texts: the turn as served today; the previous turn of the same session, then the turn; the
previous and the next turn around it; the session's date, then the turn; and the better of
two vectors per turn (its own and the one with the previous turn), as a second vector per
turn would give. Writes benchmarks/results/turn-texts-<date>.json and .md (`--out DIR`).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from haki_context.core.embedding.embedder import Encoder, HashingEncoder, OnnxMiniLMEncoder

from .in_process import write_result
from .locomo import Conversation, Turn, add_data_argument, load_conversations

RESULTS = Path(__file__).resolve().parent / "results"
KS = (10, 32, 64, 128)
TWO_VECTORS = "its own or with the previous turn (2 vectors)"


def _previous(turns: list[Turn]) -> list[str]:
    return [turns[i - 1].text if i and turns[i - 1].session == t.session else "" for i, t in enumerate(turns)]


def _next(turns: list[Turn]) -> list[str]:
    last = len(turns) - 1
    return [turns[i + 1].text if i < last and turns[i + 1].session == t.session else "" for i, t in enumerate(turns)]


# Each text a turn's vector may hold, from the conversation's turns in order.
TEXTS: dict[str, Callable[[list[Turn]], list[str]]] = {
    "the turn (today)": lambda turns: [t.text for t in turns],
    "previous turn + the turn": lambda turns: [f"{p}\n{t.text}".strip() for t, p in zip(turns, _previous(turns))],
    "previous + the turn + next": lambda turns: [
        f"{p}\n{t.text}\n{n}".strip() for t, p, n in zip(turns, _previous(turns), _next(turns))
    ],
    "session date + the turn": lambda turns: [f"[{t.occurred_at:%d %B %Y}] {t.text}" for t in turns],
}


def measure(conversations: list[Conversation], encoder: Encoder) -> dict[str, dict[str, dict[str, float]]]:
    """Recall and hit of the evidence turns among the k nearest, per text and k."""
    sums: dict[str, dict[int, list[int]]] = {}
    for conv in conversations:
        questions = encoder.encode([q.question for q in conv.questions])
        ids = [t.dia_id for t in conv.turns]
        vectors = {name: encoder.encode(text_of(conv.turns)) for name, text_of in TEXTS.items()}
        sims = {name: questions @ v.T for name, v in vectors.items()}
        sims[TWO_VECTORS] = np.maximum(sims["the turn (today)"], sims["previous turn + the turn"])
        for name, s in sims.items():
            order = np.argsort(-s, axis=1, kind="stable")
            for qi, q in enumerate(conv.questions):
                evidence = set(q.evidence)
                for k in KS:
                    found = len(evidence & {ids[j] for j in order[qi, :k]})
                    row = sums.setdefault(name, {}).setdefault(k, [0, 0, 0, 0])
                    row[0] += found
                    row[1] += len(evidence)
                    row[2] += found > 0
                    row[3] += 1
    return {
        name: {str(k): {"recall": round(r[0] / r[1], 4), "hit": round(r[2] / r[3], 4)} for k, r in by_k.items()}
        for name, by_k in sums.items()
    }


def markdown(report: dict[str, Any]) -> str:
    lines = [
        f"# Turn texts: dense retrieval of evidence turns ({report['date']})",
        "",
        f"LoCoMo {', '.join(report['conversations'])}: {report['questions']} questions, {report['turns']} turns. "
        f"Embedder: {report['embedder']}. Recall / hit of the evidence turns among the k turns nearest "
        "the question, by the text each turn's vector holds.",
        "",
        "| text | " + " | ".join(f"k = {k}" for k in KS) + " |",
        "|---|" + "---:|" * len(KS),
    ]
    for name, by_k in report["results"].items():
        cells = " | ".join(f"{by_k[str(k)]['recall']:.3f} / {by_k[str(k)]['hit']:.3f}" for k in KS)
        lines.append(f"| {name} | {cells} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.turn_texts",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_data_argument(parser)
    parser.add_argument("--conversations", help="comma-separated conversation ids (default: all)")
    parser.add_argument("--embedder", choices=["onnx", "hashing"], default="onnx")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    conversations = load_conversations(args.data, args.conversations.split(",") if args.conversations else None)
    encoder: Encoder = OnnxMiniLMEncoder.shipped(threads=1) if args.embedder == "onnx" else HashingEncoder()
    started = time.perf_counter()
    results = measure(conversations, encoder)
    report = {
        "date": datetime.now(UTC).date().isoformat(),
        "conversations": [c.id for c in conversations],
        "questions": sum(len(c.questions) for c in conversations),
        "turns": sum(len(c.turns) for c in conversations),
        "embedder": encoder.name,
        "ks": list(KS),
        "results": results,
        "wall_s": round(time.perf_counter() - started, 1),
    }
    write_result(args.out, "turn-texts", report, markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
