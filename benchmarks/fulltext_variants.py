"""Full-text what-ifs for benchmarks.rerank: other ts_rank_cd settings on the same turns.

    python -m benchmarks.fulltext_variants DUMP.json OUT.json

Loads the turns of the dump's conversations into a scratch table of an
embedded PostgreSQL (`to_tsvector` of the chunk text, as the server's
generated column), and for every question of the dump computes, per turn,
the full-text rank under variants of the server's rule (db/retrieval.py: the
OR of the `english` lexemes of the query, `ts_rank_cd(search_vector, q)`):

- `norm1`, `norm2`, `norm32`: ts_rank_cd normalisation flags (1: / 1 + log
  length, 2: / length, 32: rank / (rank + 1));
- `nonames`: the query's lexemes minus the subject's speaker names;
- `simple`: the `simple` configuration (no stemming, stop words kept) instead;
- `both`: english rank + simple rank (an English and a simple index beside).

Writes the dump again with `ft_variants: {name: [rank per candidate]}` on
every question.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
from pathlib import Path
from typing import Any

import asyncpg
import orjson

from haki_context.db import embedded

from .locomo import load_conversations
from .quality import DEFAULT_DATA

_QUERY = """
WITH q AS (
  SELECT (SELECT string_agg('''' || replace(replace(lexeme, '\\', '\\\\'), '''', '''''') || '''', ' | ')::tsquery
            FROM (SELECT lexeme FROM unnest(to_tsvector('english', $2)) ORDER BY positions[1], lexeme LIMIT 32) l) AS en,
         (SELECT string_agg('''' || replace(replace(lexeme, '\\', '\\\\'), '''', '''''') || '''', ' | ')::tsquery
            FROM (SELECT lexeme FROM unnest(to_tsvector('english', $2)) WHERE lexeme <> ALL($3::text[])
                  ORDER BY positions[1], lexeme LIMIT 32) l) AS en_nonames,
         (SELECT string_agg('''' || replace(replace(lexeme, '\\', '\\\\'), '''', '''''') || '''', ' | ')::tsquery
            FROM (SELECT lexeme FROM unnest(to_tsvector('simple', $2)) ORDER BY positions[1], lexeme LIMIT 32) l) AS si
)
SELECT t.dia_id,
  coalesce(CASE WHEN t.en @@ q.en THEN ts_rank_cd(t.en, q.en) END, 0) AS base,
  coalesce(CASE WHEN t.en @@ q.en THEN ts_rank_cd(t.en, q.en, 1) END, 0) AS norm1,
  coalesce(CASE WHEN t.en @@ q.en THEN ts_rank_cd(t.en, q.en, 2) END, 0) AS norm2,
  coalesce(CASE WHEN t.en @@ q.en THEN ts_rank_cd(t.en, q.en, 32) END, 0) AS norm32,
  coalesce(CASE WHEN t.en @@ q.en_nonames THEN ts_rank_cd(t.en, q.en_nonames) END, 0) AS nonames,
  coalesce(CASE WHEN t.si @@ q.si THEN ts_rank_cd(t.si, q.si) END, 0) AS simple
FROM turns t, q WHERE t.conv = $1
"""
VARIANTS = ("base", "norm1", "norm2", "norm32", "nonames", "simple")


async def compute(dump: dict[str, Any], data_dir: Path) -> None:
    rows = dump["questions"]
    convs = {c.id: c for c in load_conversations(data_dir, sorted({q["conversation"] for q in rows}))}
    tmp = Path(tempfile.mkdtemp(prefix="haki-ft-", dir="/tmp"))
    server = await asyncio.to_thread(embedded.start, tmp / "data")
    try:
        conn = await asyncpg.connect(server.uri)
        await conn.execute(
            "CREATE TEMP TABLE turns (conv text, dia_id text, text text,"
            " en tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED,"
            " si tsvector GENERATED ALWAYS AS (to_tsvector('simple', text)) STORED)"
        )
        await conn.copy_records_to_table(
            "turns",
            records=[(c.id, t.dia_id, t.text) for c in convs.values() for t in c.turns],
            columns=["conv", "dia_id", "text"],
        )
        cache: dict[tuple[str, str], dict[str, dict[str, float]]] = {}
        for q in rows:
            key = (q["conversation"], q["question"])
            if key not in cache:
                conv = convs[q["conversation"]]
                names = [
                    lexeme
                    for s in conv.speakers
                    for lexeme in await conn.fetchval(
                        "SELECT array(SELECT lexeme FROM unnest(to_tsvector('english', $1)))", s
                    )
                ]
                got = await conn.fetch(_QUERY, q["conversation"], q["question"], names)
                cache[key] = {r["dia_id"]: {v: float(r[v]) for v in VARIANTS} for r in got}
            by_turn = cache[key]
            q["ft_variants"] = {v: [by_turn[c[0]][v] for c in q["candidates"]] for v in VARIANTS}
            q["ft_variants"]["both"] = [a + b for a, b in zip(q["ft_variants"]["base"], q["ft_variants"]["simple"])]
        await conn.close()
    finally:
        server.close()
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.fulltext_variants", description=__doc__.split("\n\n")[0])
    p.add_argument("dump", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    a = p.parse_args(argv)
    dump = orjson.loads(a.dump.read_bytes())
    asyncio.run(compute(dump, a.data))
    a.out.write_bytes(orjson.dumps(dump))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
