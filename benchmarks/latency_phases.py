"""The latency harness's timed phases on one N: (a) `assemble` in-process, with calls after idle;
(b) HTTP with one client, agent and debugging selections; (c) concurrent clients and throughput;
and ingestion through `recordEvents` beside the raw embedder."""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

import httpx
import numpy as np

from haki_context.core.serving.runtime import Runtime
from haki_context.core.texts import event_chunks

from . import latency_texts
from .latency_common import INGEST_SUBJECT, PROJECT, SUBJECT, Config, Questions, assemble, dist, ms_since
from .latency_server import (
    AGENT_QUERY,
    DEBUG_QUERY,
    RECORD_EVENTS,
    Server,
    closed_loop,
    graphql,
    server_side,
    trace_rows,
)
from .lean_http import LeanClient


async def measure_in_process(rt: Runtime, cfg: Config, qs: Questions) -> dict[str, Any]:
    for q in qs.take(cfg.warmup):
        await assemble(rt, PROJECT, SUBJECT, q, cfg.budget)
    hits, misses = rt.embedder.cache_hits, rt.embedder.cache_misses
    client: list[float] = []
    parts: dict[str, list[float]] = {k: [] for k in ("embed", "retrieve", "pack", "persist", "total")}
    facts, episodes, decisions = [], [], []
    for q in qs.take(cfg.queries):
        t = time.perf_counter()
        packet = await assemble(rt, PROJECT, SUBJECT, q, cfg.budget)
        client.append(ms_since(t))
        tm = packet.trace.timings
        for k in parts:
            parts[k].append(getattr(tm, f"{k}_ms"))
        facts.append(len(packet.facts))
        episodes.append(len(packet.episodes))
        decisions.append(len(packet.trace.decisions or ()))
    hits, misses = rt.embedder.cache_hits - hits, rt.embedder.cache_misses - misses
    # What an agent calling now and then meets: each call after the process sat idle.
    after_idle = []
    for q in qs.take(cfg.idle_calls):
        await asyncio.sleep(cfg.idle_s)
        t = time.perf_counter()
        await assemble(rt, PROJECT, SUBJECT, q, cfg.budget)
        after_idle.append(ms_since(t))
    return {
        "latency_ms": dist(client),
        "after_idle_ms": {**dist(after_idle), "idle_s": cfg.idle_s},
        "breakdown_ms": {k: dist(v) for k, v in parts.items()},
        "outside_trace_ms": dist([c - t for c, t in zip(client, parts["total"])]),
        "facts_served_mean": float(np.mean(facts)),
        "episodes_served_mean": float(np.mean(episodes)),
        "decisions_mean": float(np.mean(decisions)),
        "query_cache": {"hits": hits, "misses": misses, "hit_rate": hits / max(1, hits + misses)},
    }


async def measure_http(rt: Runtime, server: Server, cfg: Config, qs: Questions) -> dict[str, Any]:
    out: dict[str, Any] = {}
    client = LeanClient(server.url)
    try:
        for q in qs.take(cfg.warmup):
            await graphql(client, AGENT_QUERY, {"s": SUBJECT, "q": q, "b": cfg.budget})
        calls: list[tuple[float, str]] = []
        for q in qs.take(cfg.http_queries):
            ms, data = await graphql(client, AGENT_QUERY, {"s": SUBJECT, "q": q, "b": cfg.budget})
            calls.append((ms, data["context"]["traceId"]))
        out["agent"] = {
            "latency_ms": dist([ms for ms, _ in calls]),
            **server_side(calls, await trace_rows(rt, [i for _, i in calls])),
        }

        # The same selection through httpx, the client most Python agents call through.
        async with httpx.AsyncClient(base_url=server.url, timeout=120.0) as hx:
            for q in qs.take(max(1, cfg.warmup // 2)):
                await graphql(hx, AGENT_QUERY, {"s": SUBJECT, "q": q, "b": cfg.budget})
            calls = []
            for q in qs.take(cfg.http_queries):
                ms, data = await graphql(hx, AGENT_QUERY, {"s": SUBJECT, "q": q, "b": cfg.budget})
                calls.append((ms, data["context"]["traceId"]))
        out["agent_httpx"] = {
            "latency_ms": dist([ms for ms, _ in calls]),
            **server_side(calls, await trace_rows(rt, [i for _, i in calls])),
        }

        for q in qs.take(max(1, cfg.warmup // 2)):
            await graphql(client, DEBUG_QUERY, {"s": SUBJECT, "q": q, "b": cfg.budget})
        calls, decisions = [], []
        for q in qs.take(cfg.debug_queries):
            ms, data = await graphql(client, DEBUG_QUERY, {"s": SUBJECT, "q": q, "b": cfg.budget})
            calls.append((ms, data["context"]["traceId"]))
            decisions.append(len(data["context"]["trace"]["decisions"]))
        out["debug"] = {
            "latency_ms": dist([ms for ms, _ in calls]),
            "decisions_mean": float(np.mean(decisions)) if decisions else 0.0,
            **server_side(calls, await trace_rows(rt, [i for _, i in calls])),
        }
    finally:
        await client.aclose()
    return out


async def measure_concurrent(rt: Runtime, server: Server, cfg: Config, qs: Questions) -> dict[str, Any]:
    warm_up = qs.take(cfg.concurrency)
    wall, answered = await closed_loop(
        server.url, AGENT_QUERY, qs.take(cfg.concurrent_calls), warm_up, clients=cfg.concurrency, budget=cfg.budget
    )
    calls = [(ms, data["context"]["traceId"]) for ms, data in answered]
    return {
        "clients": cfg.concurrency,
        "calls": len(calls),
        "wall_s": round(wall, 3),
        "throughput_calls_per_s": round(len(calls) / wall, 2),
        "latency_ms": dist([ms for ms, _ in calls]),
        **server_side(calls, await trace_rows(rt, [i for _, i in calls])),
    }


async def measure_ingestion(rt: Runtime, server: Server, cfg: Config, n: int) -> dict[str, Any]:
    specs = list(itertools.islice(latency_texts.events(seed=1000 + n), cfg.ingest + 10))
    warm, specs = specs[:10], specs[10:]
    limit = rt.settings.episode_excerpt_chars
    texts = [c.text for e in specs for c in event_chunks(e.kind, e.payload, limit)]

    def inputs(batch: list[latency_texts.EventSpec]) -> list[dict[str, Any]]:
        return [
            {"subjectId": INGEST_SUBJECT, "kind": e.kind, "payload": e.payload, "occurredAt": e.occurred_at.isoformat()}
            for e in batch
        ]

    async def raw() -> float:
        t = time.perf_counter()
        await rt.embedder.embed_many(texts)
        return len(texts) / (time.perf_counter() - t)

    raw_before = await raw()
    async with httpx.AsyncClient(base_url=server.url, timeout=600.0) as client:
        await graphql(client, RECORD_EVENTS, {"inputs": inputs(warm)})
        batches = []
        t = time.perf_counter()
        for start in range(0, len(specs), cfg.ingest_batch):
            part = specs[start : start + cfg.ingest_batch]
            ms, data = await graphql(client, RECORD_EVENTS, {"inputs": inputs(part)})
            assert len(data["recordEvents"]) == len(part)
            batches.append(ms)
        wall = time.perf_counter() - t
    raw_after = await raw()
    events_per_s = len(specs) / wall
    raw_mean = (raw_before + raw_after) / 2
    return {
        "events": len(specs),
        "chunks": len(texts),
        "batch": cfg.ingest_batch,
        "wall_s": round(wall, 3),
        "events_per_s": round(events_per_s, 1),
        "chunks_per_s": round(len(texts) / wall, 1),
        "batch_ms": dist(batches),
        "raw_embedder_texts_per_s": {
            "before": round(raw_before, 1),
            "after": round(raw_after, 1),
            "mean": round(raw_mean, 1),
        },
        "ratio_to_raw_embedder": round(events_per_s / raw_mean, 3),
    }
