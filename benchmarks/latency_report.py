"""The latency benchmark's result files: the JSON, the markdown table, the PNG plot (with matplotlib,
the `[bench]` extra; skipped with a note without it), and the list of figures a result must hold.

`python -m benchmarks.latency_report OUT_STEM RESULT.json...` merges several results (one N each)
into one table and plot."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path
from typing import Any

# Every figure a run of benchmarks.latency reports, per N (dotted paths into one run's dict).
RUN_FIGURES = [
    *(f"in_process.latency_ms.{p}" for p in ("p50", "p95", "p99")),
    *(f"in_process.breakdown_ms.{k}.p50" for k in ("embed", "retrieve", "pack", "persist", "total")),
    "in_process.query_cache.hit_rate",
    "in_process.after_idle_ms.p50",
    *(f"http.agent.latency_ms.{p}" for p in ("p50", "p95", "p99")),
    *(f"http.agent_httpx.latency_ms.{p}" for p in ("p50", "p95", "p99")),
    "http.agent.overhead_ms.p50",
    "http.agent.query_cache_inferred.hit_rate",
    *(f"http.debug.latency_ms.{p}" for p in ("p50", "p95", "p99")),
    "http.debug.overhead_ms.p50",
    "http.debug.decisions_mean",
    *(f"concurrent.latency_ms.{p}" for p in ("p50", "p95", "p99")),
    "concurrent.throughput_calls_per_s",
    "sql.ours_fact_candidates_ms.p50",
    "sql.naive_full_scan_ms.p50",
    "sql.episode_candidates_ms.p50",
    "sql.ratio_ours_over_naive.p50_of_ratios",
    "sql.ratio_ours_over_naive.ratio_of_p50s",
    "recall.facts_mean",
    "recall.episodes_mean",
    "recall.facts_below_0_9",
    "recall.episodes_below_0_9",
    "ingestion.events_per_s",
    "ingestion.raw_embedder_texts_per_s.mean",
    "ingestion.ratio_to_raw_embedder",
    "server.peak_rss_mb",
]
TOP_FIGURES = ["wall_s", "loadavg_start", "loadavg_end"]


def get(d: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(d, dict) or part not in d:
            return None
        d = d[part]
    return d


def _finite(x: Any) -> bool:
    if isinstance(x, list):
        return bool(x) and all(_finite(v) for v in x)
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(float(x))


def missing_figures(result: dict[str, Any]) -> list[str]:
    """Paths of figures absent or not finite (empty when the result is complete)."""
    missing = [p for p in TOP_FIGURES if not _finite(result.get(p))]
    if not result.get("runs"):
        missing.append("runs")
    for run in result.get("runs") or []:
        missing += [f"N={run.get('n')}:{p}" for p in RUN_FIGURES if not _finite(get(run, p))]
    return missing


def _f(x: Any, digits: int = 1) -> str:
    return f"{x:,.{digits}f}" if _finite(x) else "–"


def _ppp(d: dict[str, Any] | None) -> str:
    d = d or {}
    return f"{_f(d.get('p50'))} / {_f(d.get('p95'))} / {_f(d.get('p99'))}"


def rows(result: dict[str, Any]) -> list[tuple[str, list[str]]]:
    out: list[tuple[str, list[str]]] = []

    def add(label: str, fn: Any) -> None:
        out.append((label, [fn(r) for r in result["runs"]]))

    add("(a) in-process `assemble`, p50 / p95 / p99 ms", lambda r: _ppp(get(r, "in_process.latency_ms")))
    add(
        "(a) the same, each call after idle (s), p50 / p95 / p99 ms",
        lambda r: _ppp(get(r, "in_process.after_idle_ms")) + f" ({_f(get(r, 'in_process.after_idle_ms.idle_s'))} s)",
    )
    add("(b) HTTP, 1 client, agent selection, p50 / p95 / p99 ms", lambda r: _ppp(get(r, "http.agent.latency_ms")))
    add("(b) the same through httpx, p50 / p95 / p99 ms", lambda r: _ppp(get(r, "http.agent_httpx.latency_ms")))
    add(
        "(b) HTTP, 1 client, debugging selection, p50 / p95 / p99 ms",
        lambda r: _ppp(get(r, "http.debug.latency_ms")) + f" ({_f(get(r, 'http.debug.decisions_mean'), 0)} decisions)",
    )
    add("(c) HTTP, 8 clients, agent selection, p50 / p95 / p99 ms", lambda r: _ppp(get(r, "concurrent.latency_ms")))
    add("(c) throughput, calls/s", lambda r: _f(get(r, "concurrent.throughput_calls_per_s")))
    add("(d) our fact SQL, p50 / p95 / p99 ms", lambda r: _ppp(get(r, "sql.ours_fact_candidates_ms")))
    add("(d) naive full-scan SQL, p50 / p95 / p99 ms", lambda r: _ppp(get(r, "sql.naive_full_scan_ms")))
    add(
        "(d) ours / naive: p50 of ratios; ratio of p50s",
        lambda r: (
            f"{_f(get(r, 'sql.ratio_ours_over_naive.p50_of_ratios'), 3)}; "
            f"{_f(get(r, 'sql.ratio_ours_over_naive.ratio_of_p50s'), 3)} "
            f"({_f(get(r, 'sql.ratio_ours_over_naive.speedup_p50'), 1)}x faster)"
        ),
    )
    add("episode SQL, p50 / p95 / p99 ms", lambda r: _ppp(get(r, "sql.episode_candidates_ms")))
    first = result["runs"][0] if result["runs"] else {}
    add(
        f"phase-1 recall vs exact: facts k={get(first, 'recall.facts_k')}; "
        f"episodes k={get(first, 'recall.episodes_k')} (mean, min, share of queries < 0.9, plan)",
        lambda r: (
            f"{_f(get(r, 'recall.facts_mean'), 3)} ({_f(get(r, 'recall.facts_min'), 3)}, "
            f"{_f(get(r, 'recall.facts_below_0_9'), 2)}, {get(r, 'recall.facts_plan')}); "
            f"{_f(get(r, 'recall.episodes_mean'), 3)} ({_f(get(r, 'recall.episodes_min'), 3)}, "
            f"{_f(get(r, 'recall.episodes_below_0_9'), 2)}, {get(r, 'recall.episodes_plan')})"
        ),
    )
    add(
        "in-process p50 ms: embed / retrieve / pack / persist / total",
        lambda r: " / ".join(
            _f(get(r, f"in_process.breakdown_ms.{k}.p50"), 2) for k in ("embed", "retrieve", "pack", "persist", "total")
        ),
    )
    add(
        "HTTP 1 client, server p50 ms: embed / retrieve / pack / persist / total",
        lambda r: " / ".join(
            _f(get(r, f"http.agent.server_breakdown_ms.{k}.p50"), 2)
            for k in ("embed", "retrieve", "pack", "persist", "total")
        ),
    )
    add(
        "GraphQL + HTTP + trace commit (client − totalMs) p50 ms: agent; debugging",
        lambda r: f"{_f(get(r, 'http.agent.overhead_ms.p50'), 2)}; {_f(get(r, 'http.debug.overhead_ms.p50'), 2)}",
    )
    add(
        "ingestion via recordEvents over GraphQL, events/s",
        lambda r: f"{_f(get(r, 'ingestion.events_per_s'))} (batch {get(r, 'ingestion.batch')})",
    )
    add(
        "raw embedder on the same texts, texts/s (before; after)",
        lambda r: (
            f"{_f(get(r, 'ingestion.raw_embedder_texts_per_s.before'))}; "
            f"{_f(get(r, 'ingestion.raw_embedder_texts_per_s.after'))}"
        ),
    )
    add("ingestion / raw embedder", lambda r: _f(get(r, "ingestion.ratio_to_raw_embedder"), 2))
    add("server peak RSS, MB", lambda r: _f(get(r, "server.peak_rss_mb"), 0))
    add(
        "query cache hit rate: in-process; server (inferred)",
        lambda r: (
            f"{_f(get(r, 'in_process.query_cache.hit_rate'), 3)}; "
            f"{_f(get(r, 'http.agent.query_cache_inferred.hit_rate'), 3)}"
        ),
    )
    add(
        "1-min load average at (a) / (d) / (b) / (c) / ingestion",
        lambda r: " / ".join(_f(v, 1) for v in (get(r, "loadavg_1min_by_phase") or {}).values()) or "–",
    )
    add(
        "seeding: embedded (cached) texts; COPY s; scope indexes build s",
        lambda r: (
            ("database kept from an earlier run; " if get(r, "seed.reused") else "")
            + f"{get(r, 'seed.embedding.facts.embedded') + get(r, 'seed.embedding.chunks.embedded')} "
            f"({get(r, 'seed.embedding.facts.cached') + get(r, 'seed.embedding.chunks.cached')}); "
            f"{_f(get(r, 'seed.timings_s.copy'))}; "
            f"{_f(sum(v for k, v in (get(r, 'seed.timings_s') or {}).items() if k.startswith('create_')))}"
        ),
    )
    return out


def table(result: dict[str, Any], plot_name: str | None = None) -> str:
    m = result.get("machine", {})
    header = ["figure", *(f"N = {r['n']:,}" for r in result["runs"])]
    lines = [
        f"# Latency benchmark, {result.get('started_at', '')[:10]}",
        "",
        f"Machine: {m.get('cpus')} CPUs ({m.get('cpu_model')}), {m.get('memory_gb')} GiB, {m.get('platform')}; "
        + (f"torch {m['torch']}; " if m.get("torch") else "")
        + f"PostgreSQL {get(result, 'postgres.version')} "
        f"(shared_buffers {get(result, 'postgres.shared_buffers')}), pgvector {get(result, 'postgres.pgvector')}.",
        f"Embedder: {result['runs'][0].get('embedder') if result['runs'] else '?'}; budget "
        f"{get(result, 'config.budget')}; one subject of N facts + N events in 10 such subjects. "
        f"Load average at start {_load(result.get('loadavg_start'))}, at end {_load(result.get('loadavg_end'))}; "
        f"wall time {_f(result.get('wall_s'), 0)} s.",
        f"Command: `{result.get('command', '')}`",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for label, cells in rows(result):
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    if plot_name:
        lines += ["", f"![p50/p95 latency against N]({plot_name})"]
    return "\n".join(lines) + "\n"


def _load(x: Any) -> str:
    return " ".join(f"{v:.2f}" for v in x) if isinstance(x, list) else "?"


def can_plot() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = result["runs"]
    ns = [r["n"] for r in runs]
    series = [
        ("in-process", "in_process.latency_ms"),
        ("HTTP agent, 1 client", "http.agent.latency_ms"),
        ("HTTP debugging, 1 client", "http.debug.latency_ms"),
        ("HTTP agent, 8 clients", "concurrent.latency_ms"),
        ("our fact SQL", "sql.ours_fact_candidates_ms"),
        ("naive SQL", "sql.naive_full_scan_ms"),
    ]
    fig, ax = plt.subplots(figsize=(10.5, 5), dpi=110)
    for k, (label, key) in enumerate(series):
        color = f"C{k}"
        ax.plot(ns, [get(r, f"{key}.p50") for r in runs], "o-", color=color, label=f"{label} p50")
        ax.plot(ns, [get(r, f"{key}.p95") for r in runs], "s--", color=color, alpha=0.6, label=f"{label} p95")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(ns, [f"{n:,}" for n in ns])
    ax.set_xlabel("N (facts and events of the subject; the tables hold 10 such subjects)")
    ax.set_ylabel("ms")
    m = result.get("machine", {})
    ax.set_title(
        f"context latency, budget {get(result, 'config.budget')} — {m.get('cpus')} CPUs, "
        f"{result.get('started_at', '')[:10]}"
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def merge(results: list[dict[str, Any]]) -> dict[str, Any]:
    """One result holding the runs of several (one N each, e.g. a --reuse run per N), by N;
    the machine and settings are the last one's, and each source command is kept."""
    runs = sorted((run for r in results for run in r["runs"]), key=lambda run: run["n"])
    merged = {**results[-1], "runs": runs}
    merged["command"] = " ; ".join(r.get("command", "?") for r in results)
    merged["wall_s"] = sum(r.get("wall_s") or 0 for r in results)
    return merged


def write(result: dict[str, Any], out: Path, stem: str) -> dict[str, Path]:
    """OUT/STEM.json, .md and, where matplotlib is installed, .png; returns the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / f"{stem}.json", "md": out / f"{stem}.md"}
    paths["json"].write_text(json.dumps(result, indent=2, default=str))
    if can_plot():
        paths["png"] = out / f"{stem}.png"
        plot(result, paths["png"])
        paths["md"].write_text(table(result, plot_name=paths["png"].name))
    else:
        note = "\n(no plot: matplotlib is not installed; `pip install -e '.[bench]'` adds it)\n"
        paths["md"].write_text(table(result) + note)
    return paths


def main(argv: list[str] | None = None) -> int:
    """`python -m benchmarks.latency_report OUT_STEM RESULT.json...`: the table and plot of
    several latency results together (OUT_STEM.json, .md and .png)."""
    import argparse

    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("out", type=Path, help="output path without extension")
    p.add_argument("results", type=Path, nargs="+")
    args = p.parse_args(argv)
    merged = merge([json.loads(path.read_text()) for path in args.results])
    write(merged, args.out.parent, args.out.name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
