"""The decisions of this checkout and another revision, question by question: `python -m benchmarks.decisions_ab`.

revision_ab compares the latency of two revisions; this compares what they decide. Each side
runs in a process of its own, from its own tree (this checkout, and a git worktree of
`--baseline`), on the latency benchmark's database (`--database-url URL/haki_bench_<N>`), and
assembles the same distinct questions in process (budget 900) with the scope indexes' build
off. `--locomo` asks instead every LoCoMo question of categories 1-4 ($LOCOMO_DIR) of its
conversation's subject on a database the quality harness ingested in mode f
(`python -m benchmarks.quality --database-url URL --modes f`). For each question it records every decision (item, decision, reason, rank, score
components); the figure is the share of questions whose decisions are the same on both sides
(scores within 1e-9 relative). The two sides run at other instants, so recency (and the score)
moves a little between them: the comparison uses the score components other than recency and
score unless `--exact-scores`.

Prints the figures and writes benchmarks/results/decisions-ab-<date>.json (or `--out FILE`).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import asyncpg

from . import latency_texts, locomo
from .latency_common import PROJECT, REPO_ROOT, SUBJECT, dated_result, write_result
from .revision_ab import worktree

# Run in each tree (its own haki_context on sys.path first): the decisions of each question as JSON.
_SIDE = r"""
import asyncio, itertools, json, sys
sys.path.insert(0, sys.argv[1])
from haki_context.app import open_runtime
try:  # where the pipeline lives; a revision from before core/ was grouped holds it in core/assembler.py
    from haki_context.core.context.assembler import start_assembly
except ImportError:
    from haki_context.core.assembler import start_assembly
from haki_context.settings import Settings
from benchmarks.latency_common import PROJECT

async def main():
    settings = Settings(database_url=sys.argv[2], embed_provider="onnx", dev_mode=True, scope_index_interval_s=0)
    rt, stack = await open_runtime(settings)
    out = []
    async with stack:
        for subject, q in json.loads(open(sys.argv[3]).read()):
            assembly = await start_assembly(rt, PROJECT, subject, q, 900)
            write = getattr(assembly, "write", None)  # an older revision's Assembly holds the future itself
            await (write.committed() if write is not None else assembly.written)
            packet = assembly.packet
            out.append([[d.item_kind.value, d.item_id, d.chunk, d.decision.value, d.reason_code.value, d.rank,
                         d.score, d.similarity, d.full_text, d.recency, d.distance] for d in packet.trace.decisions])
    json.dump(out, sys.stdout)

asyncio.run(main())
"""

# Positions of the compared fields in a decision row above.
_KEYS = slice(0, 6)
_COMPONENTS = {"score": 6, "similarity": 7, "full_text": 8, "recency": 9, "distance": 10}


def side(root: Path, dsn: str, asked: Path) -> list[list[list[Any]]]:
    """Every decision of each (subject, question) of the JSON file `asked`, assembled in `root`'s tree."""
    result = subprocess.run(
        [sys.executable, "-c", _SIDE, str(root), dsn, str(asked)],
        cwd=root,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(result.stdout)


def latency_pairs(questions: int, seed: int) -> list[tuple[str, str]]:
    """The latency benchmark's subject and `questions` distinct questions."""
    return [(SUBJECT, q) for q in itertools.islice(latency_texts.questions(seed=seed), questions)]


async def locomo_pairs(dsn: str) -> list[tuple[str, str]]:
    """Each LoCoMo question of categories 1-4 with its conversation's mode-f subject in the database."""
    data = locomo.data_dir()
    if data is None:
        raise SystemExit(f"--locomo {locomo.NEEDS_DATA}")
    conn = await asyncpg.connect(dsn)
    try:
        subjects = [
            r["subject_id"]
            for r in await conn.fetch(
                "SELECT DISTINCT subject_id FROM events WHERE project_id = $1 AND subject_id LIKE 'locomo-%-f-%'",
                PROJECT,
            )
        ]
    finally:
        await conn.close()
    pairs = []
    for conv in locomo.load_conversations(data):
        (subject,) = [s for s in subjects if s.startswith(f"locomo-{conv.id}-f-")]
        pairs += [(subject, q.question) for q in conv.questions]
    return pairs


def same(a: list[list[Any]], b: list[list[Any]], components: list[int]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if x[_KEYS] != y[_KEYS]:
            return False
        for i in components:
            if (x[i] is None) != (y[i] is None):
                return False
            if x[i] is not None and abs(x[i] - y[i]) > 1e-9 * max(1.0, abs(x[i]), abs(y[i])):
                return False
    return True


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.decisions_ab", description=__doc__)
    p.add_argument("--baseline", required=True, help="a git revision")
    p.add_argument("--database-url", required=True, help="URL of the latency benchmark's database")
    p.add_argument("--questions", type=int, default=200)
    p.add_argument("--seed", type=int, default=4242)
    p.add_argument("--exact-scores", action="store_true", help="compare recency and the score too")
    p.add_argument("--locomo", action="store_true", help="the LoCoMo questions of a quality harness's database")
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args(argv)
    pairs = asyncio.run(locomo_pairs(a.database_url)) if a.locomo else latency_pairs(a.questions, a.seed)
    with tempfile.TemporaryDirectory() as tmp:
        asked = Path(tmp) / "asked.json"
        asked.write_text(json.dumps(pairs))
        with worktree(a.baseline) as baseline_root:
            before = side(baseline_root, a.database_url, asked)
        after = side(REPO_ROOT, a.database_url, asked)
    names = list(_COMPONENTS) if a.exact_scores else ["similarity", "full_text", "distance"]
    components = [_COMPONENTS[n] for n in names]
    identical = sum(same(x, y, components) for x, y in zip(before, after, strict=True))
    result = {
        "baseline": a.baseline,
        "questions": len(pairs),
        "workload": "locomo, mode f" if a.locomo else "latency",
        "compared": ["item", "decision", "reason", "rank", *names],
        "identical": identical,
        "share_identical": identical / len(pairs),
    }
    write_result(result, a.out or dated_result("decisions-ab"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
