"""One line per result file: `python -m benchmarks.summary benchmarks/results/quality-*.json`.

Overall recall / hit of the server beside BM25 and dense at the server's k,
for each mode and budget, and the mean number of turns served (k).
"""

from __future__ import annotations

import sys
from pathlib import Path

import orjson


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def rows(paths: list[Path]) -> list[str]:
    out = [
        "| label | mode | budget | server R / H | BM25 R / H | dense R / H | k | client p50 ms |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for path in paths:
        report = orjson.loads(path.read_bytes())
        for mode, by_budget in report["results"].items():
            for budget, res in by_budget.items():
                o = res["overall"]
                cells = " | ".join(f"{_f(o[r]['recall'])} / {_f(o[r]['hit'])}" for r in ("server", "bm25", "dense"))
                out.append(
                    f"| {report['label']} | {mode} | {budget} | {cells} | {o['k_mean']:.1f} "
                    f"| {o['latency_ms']['client_p50']:.1f} |"
                )
    return out


def main(argv: list[str] | None = None) -> int:
    paths = [Path(p) for p in (argv if argv is not None else sys.argv[1:])]
    if not paths:
        paths = sorted((Path(__file__).resolve().parent / "results").glob("quality-*.json"))
    print("\n".join(rows(paths)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
