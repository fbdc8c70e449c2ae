"""The assembler's SQL at a past instant (`context(..., asOf:)`): the memory as it stood then.

The same three statements as db/retrieval.py (fact candidates with the blocked facts, episode
candidates, multi-hop), returning the same rows, with the hard filters evaluated at the instant
`SearchParams.now` (= asOf) against the history migration 0012 keeps:

- a fact counts if it was recorded by then and had not yet ended (`ended_at` after then; a fact
  that ended at an unknown instant counts at no past instant), valid then with the validTo it
  had while ACTIVE (`active_valid_to` once superseded: the supersession cut `valid_to`);
- it is blocked if it had joined (`conflict_members.added_at`) a set open then (created by then,
  not yet resolved or dismissed);
- a VOLATILE or EPHEMERAL fact expires `horizon` after its latest reinforcement by then
  (`reinforced_at`), else its validFrom, else its recording;
- an episode chunk counts if its event was recorded by then.

Always the exact plan: the scope's rows are scanned and ranked by the half-precision inner
product, as the shared text of db/retrieval.py does for a scope without an index of its own; a
scope's own HNSW and IVFFlat indexes (approximate, and holding today's rows) are never used. The
scope's size for the idf rank and the over-fetch is its row count at the instant. The full-text
rank is the same function as the live path's (FULL_TEXT_RANKS), so a scope's common lexemes
(`scope_lexemes`, refreshed in the background) are read as they stand now. These statements are
separate texts on purpose: a call without asOf runs db/retrieval.py's, unchanged.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

import asyncpg

from .retrieval import (
    _FACT_COLUMN_NAMES,
    _LEXEME_QUERIES,
    _QUERY_LEXEMES,
    _SCOPED,
    _TEXT_SCOPE,
    CHUNK_COLUMNS,
    FULL_TEXT_RANKS,
    EpisodeCandidates,
    FactCandidates,
    FactRow,
    SearchParams,
    _fact_row,
    _multi_hop_args,
    _rank_args,
    chunk_row,
    fact_candidates_of,
)

_FACT_COLUMNS = ", ".join(f"f.{c}" for c in _FACT_COLUMN_NAMES)

# The validTo a fact had while ACTIVE.
_VALID_TO = "(CASE WHEN {a}.end_reason = 'SUPERSEDED' THEN {a}.active_valid_to ELSE {a}.valid_to END)"
_VALID_AT = f"({{a}}.valid_from IS NULL OR {{a}}.valid_from <= $5) AND ({_VALID_TO} IS NULL OR {_VALID_TO} > $5)"

# A fact row ACTIVE and valid at $5, whatever its status now: recorded by then, not ended by
# then (an unknown end, NULL with a reason set, is never after it), valid then.
_LIVE_AT = "f.recorded_at <= $5 AND (f.end_reason IS NULL OR f.ended_at > $5) AND " + _VALID_AT.format(a="f")

# The rows a statement at $5 ranks come in two parts, so that each part reads an index:
# - facts ACTIVE now, recorded by $5 (not in `too_new`), valid then, not blocked then: through
#   the indexes over ACTIVE facts that the live statements read (facts_scope_vectors,
#   facts_scoped_search), with the same conditions the live statements test, at $5;
# - facts that have ended since $5 (`ended`: ended_at after $5, migration 0014's index), few.
# too_new: the scope's facts recorded after $5 (facts_scope_recorded), few.
_TOO_NEW = """too_new AS MATERIALIZED (
    SELECT f.id FROM facts f WHERE f.project_id = $1 AND f.subject_id = $2 AND f.recorded_at > $5
)"""

# The subject's facts in a conflict set open at $5, having joined it by then.
_BLOCKED_IDS = """blocked_ids AS MATERIALIZED (
    SELECT DISTINCT m.fact_id AS id FROM conflict_sets c
    JOIN conflict_members m ON m.project_id = c.project_id AND m.conflict_id = c.id
    WHERE c.project_id = $1 AND c.subject_id = $2 AND c.created_at <= $5
      AND (c.resolved_at IS NULL OR c.resolved_at > $5) AND m.added_at <= $5
)"""

_ENDED = f"""ended AS MATERIALIZED (
    SELECT f.id, f.project_id, f.subject_id, f.search_vector, f.embedding_half, f.volatility,
           f.reinforced_at, f.valid_from, f.recorded_at
    FROM facts f
    WHERE f.project_id = $1 AND f.subject_id = $2 AND f.ended_at > $5 AND f.recorded_at <= $5
      AND {_VALID_AT.format(a="f")} AND f.id NOT IN (SELECT id FROM blocked_ids)
)"""

# A fact ACTIVE now that counts at $5 (see above).
_ACTIVE_AT = """{a}.status = 'ACTIVE'
    AND ({a}.valid_from IS NULL OR {a}.valid_from <= $5) AND ({a}.valid_to IS NULL OR {a}.valid_to > $5)
    AND {a}.id NOT IN (SELECT id FROM too_new) AND {a}.id NOT IN (SELECT id FROM blocked_ids)"""


def _expired_at(a: str, volatile: str, ephemeral: str) -> str:
    """VOLATILE and EPHEMERAL facts past their horizon at $5, from the latest reinforcement by then."""
    anchor = (
        f"coalesce((SELECT max(r) FROM unnest({a}.reinforced_at) r WHERE r <= $5), {a}.valid_from, {a}.recorded_at)"
    )
    return f"""({a}.volatility = 'VOLATILE' AND {anchor} + make_interval(secs => {volatile}) < $5)
    OR ({a}.volatility = 'EPHEMERAL' AND {anchor} + make_interval(secs => {ephemeral}) < $5)"""


_TEXT_ACTIVE_AT = f"{_TEXT_SCOPE.format(a='f')} AND {_ACTIVE_AT.format(a='f')}"


def _lexical(rank: str) -> tuple[str, str, str, str]:
    """The full-text part at $5, for one rank (as db/retrieval.FULL_TEXT_RANKS, over both parts):
    (CTEs ending with a comma, the top k's body, what is joined to the candidates, the rank)."""
    if rank == "idf":
        return (
            f"""lex AS (
    SELECT l.lexeme, l.q, l.sq, k.df FROM ({_QUERY_LEXEMES.format(limit="$7")}) l
    LEFT JOIN scope_lexemes k ON k.project_id = $1 AND k.subject_id = $2 AND k.table_name = 'facts'
        AND k.lexeme = l.lexeme
),
hits AS MATERIALIZED (
    SELECT l.lexeme, h.id FROM lex l
    CROSS JOIN LATERAL (SELECT f.id FROM facts f
                        WHERE l.df IS NULL AND {_TEXT_ACTIVE_AT} AND {_SCOPED.format(alias="f")} @@ l.sq
                        LIMIT $11) h
    UNION ALL
    SELECT l.lexeme, e.id FROM lex l JOIN ended e ON l.df IS NULL AND {_SCOPED.format(alias="e")} @@ l.sq
),
idf AS MATERIALIZED (
    SELECT d.lexeme, d.q, ln(1.0 + (greatest((SELECT n FROM size), d.df) - d.df + 0.5)::float8 / (d.df + 0.5)) AS w
    FROM (SELECT l.lexeme, l.q, coalesce(l.df, c.df, 0) AS df FROM lex l
          LEFT JOIN (SELECT lexeme, count(*) AS df FROM hits GROUP BY lexeme) c USING (lexeme)) d
    WHERE d.df > 0
),
lexical AS (SELECT id, sum(i.w) AS s FROM hits h JOIN idf i USING (lexeme) GROUP BY id),""",
            "SELECT id FROM lexical WHERE $6 > 0 ORDER BY s DESC, id LIMIT $6",
            "",
            """coalesce((SELECT sum(i.w) FROM idf i WHERE f.search_vector @@ i.q)
            / nullif((SELECT sum(w) FROM idf), 0), 0)::real""",
        )
    rank_of = "ts_rank_cd({a}.search_vector, tq.q)"
    return (
        f"tq AS ({_LEXEME_QUERIES.format(text='$4::text', limit='$7')}),",
        f"""SELECT id FROM (
            SELECT f.id, {rank_of.format(a="f")} AS r FROM facts f, tq
            WHERE {_TEXT_ACTIVE_AT} AND $6 > 0 AND {_SCOPED.format(alias="f")} @@ tq.sq
            UNION ALL
            SELECT e.id, {rank_of.format(a="e")} FROM ended e, tq WHERE $6 > 0 AND {_SCOPED.format(alias="e")} @@ tq.sq
        ) x ORDER BY r DESC, id LIMIT $6""",
        ", tq",
        f"CASE WHEN f.search_vector @@ tq.q THEN {rank_of.format(a='f')} ELSE 0 END",
    )


# $1 project, $2 subject, $3 vector, $4 query, $5 asOf, $6 top k, $7 lexemes, $8 blocked listed,
# $9 volatile horizon (s), $10 ephemeral horizon (s), then the idf rank's rows per lexeme ($11).


def _fact_candidates_sql(rank: str) -> str:
    ctes, top, join, rank_expr = _lexical(rank)
    return f"""
WITH {_TOO_NEW},
{_BLOCKED_IDS},
{_ENDED},
size AS (SELECT greatest(coalesce((SELECT fact_rows FROM subjects WHERE project_id = $1 AND subject_id = $2), 0)
                         - (SELECT count(*) FROM too_new), 0) AS n),
{ctes}
half AS (SELECT $3::vector::halfvec(384) AS h),
vec AS (
    SELECT id FROM (
        (SELECT f.id, f.embedding_half <#> (SELECT h FROM half) AS d FROM facts f
         WHERE f.project_id = $1 AND f.subject_id = $2 AND {_ACTIVE_AT.format(a="f")} OFFSET 0)
        UNION ALL
        (SELECT e.id, e.embedding_half <#> (SELECT h FROM half) FROM ended e)) s
    ORDER BY d, id LIMIT $6
),
fts AS ({top}),
candidates AS (SELECT id FROM vec UNION SELECT id FROM fts),
blocked AS (
    SELECT {_FACT_COLUMNS}, count(*) OVER () AS total FROM facts f
    WHERE f.project_id = $1 AND f.id IN (SELECT id FROM blocked_ids) AND f.subject_id = $2 AND {_LIVE_AT}
    ORDER BY f.id LIMIT $8
)
SELECT 'C' AS role, {_FACT_COLUMNS},
       f.embedding <=> $3 AS distance,
       {rank_expr} AS full_text,
       ({_expired_at("f", "$9", "$10")}) AS expired,
       0::bigint AS blocked_total
FROM candidates k JOIN facts f ON f.project_id = $1 AND f.id = k.id{join}
UNION ALL
SELECT 'B', {", ".join(f"b.{c}" for c in _FACT_COLUMN_NAMES)}, NULL, NULL, false, b.total
FROM blocked b
"""


# $1 project, $2 subject, $3 vector, $4 query, $5 vector k, $6 lexemes, $7 text k, $8 asOf, then
# the idf rank's rows per lexeme ($9). The events recorded after $8 (migration 0014's index) are
# few: their chunks are left out.
_SEEN = "{a}.event_id NOT IN (SELECT id FROM too_new_events)"


def _episode_candidates_sql(rank: str) -> str:
    lexical = FULL_TEXT_RANKS[rank](
        "episode_chunks",
        "c",
        f"{_TEXT_SCOPE.format(a='c')} AND {_SEEN.format(a='c')}",
        "@event_id, @chunk",
        "$7",
        "$6",
        "$9",
    )
    return f"""
WITH too_new_events AS MATERIALIZED (
    SELECT e.id FROM events e WHERE e.project_id = $1 AND e.subject_id = $2 AND e.recorded_at > $8
),
size AS (SELECT greatest(coalesce((SELECT chunk_rows FROM subjects WHERE project_id = $1 AND subject_id = $2), 0)
                         - (SELECT count(*) FROM episode_chunks c WHERE c.project_id = $1
                            AND c.event_id IN (SELECT id FROM too_new_events)), 0) AS n),
{lexical.ctes}
half AS (SELECT $3::vector::halfvec(384) AS h),
vec AS (
    SELECT event_id, chunk FROM (
        SELECT c.event_id, c.chunk, c.embedding_half <#> (SELECT h FROM half) AS d FROM episode_chunks c
        WHERE c.project_id = $1 AND c.subject_id = $2 AND {_SEEN.format(a="c")} OFFSET 0) s
    ORDER BY d, event_id, chunk LIMIT $5
),
fts AS ({lexical.top}),
candidates AS (SELECT event_id, chunk FROM vec UNION SELECT event_id, chunk FROM fts)
SELECT {CHUNK_COLUMNS},
       c.embedding <=> $3 AS distance, {lexical.rank_expr} AS full_text
FROM candidates k JOIN episode_chunks c ON c.project_id = $1 AND c.event_id = k.event_id AND c.chunk = k.chunk{lexical.join}
"""


# As db/retrieval.MULTI_HOP_SQL, at $5: $1 project, $2 subject, $3 vector, $4 entities, $5 asOf,
# $6 ids already decided, $7 per entity, $8 lexemes, $9 volatile (s), $10 ephemeral (s), $11 rows read.
_COMMON = """NOT EXISTS (SELECT 1 FROM scope_lexemes k WHERE k.project_id = $1 AND k.subject_id = $2
                            AND k.table_name = 'facts'
                            AND k.lexeme = ANY (tsvector_to_array(to_tsvector('english', e.entity))))"""
MULTI_HOP_SQL = f"""
WITH {_TOO_NEW},
{_BLOCKED_IDS},
{_ENDED}
SELECT e.entity, e.ord, {_FACT_COLUMNS},
       f.embedding <=> $3 AS distance, m.full_text
FROM unnest($4::text[]) WITH ORDINALITY AS e(entity, ord)
CROSS JOIN LATERAL (
    SELECT h.id, ts_rank_cd(h.search_vector, tq.q) AS full_text
    FROM ({_LEXEME_QUERIES.format(text="e.entity", limit="$8")}) tq
    CROSS JOIN LATERAL (
        (SELECT f.id, f.search_vector FROM facts f
         WHERE {_TEXT_ACTIVE_AT} AND NOT ({_expired_at("f", "$9", "$10")})
           AND f.id <> ALL($6::uuid[]) AND {_SCOPED.format(alias="f")} @@ tq.sq AND {_COMMON}
         LIMIT $11)
        UNION ALL
        (SELECT x.id, x.search_vector FROM ended x
         WHERE NOT ({_expired_at("x", "$9", "$10")}) AND x.id <> ALL($6::uuid[])
           AND {_SCOPED.format(alias="x")} @@ tq.sq AND {_COMMON})
    ) h
    ORDER BY 2 DESC, h.id
    LIMIT $7
) m
JOIN facts f ON f.project_id = $1 AND f.id = m.id
ORDER BY e.ord, m.full_text DESC, f.id
"""

_FACT_TEXTS = {rank: _fact_candidates_sql(rank) for rank in FULL_TEXT_RANKS}
_EPISODE_TEXTS = {rank: _episode_candidates_sql(rank) for rank in FULL_TEXT_RANKS}


async def fact_candidates(conn: asyncpg.Connection, p: SearchParams, top_k: int, blocked_limit: int) -> FactCandidates:
    """As db/retrieval.fact_candidates, at the instant `p.now`, by the exact plan."""
    args: tuple[Any, ...] = (
        p.project_id,
        p.subject_id,
        p.vector,
        p.query,
        p.now,
        top_k,
        p.max_lexemes,
        blocked_limit,
        p.horizon_volatile_s,
        p.horizon_ephemeral_s,
        *_rank_args(p),
    )
    rows = await conn.fetch(_FACT_TEXTS[p.full_text_rank], *args)
    return fact_candidates_of(rows, None)


async def episode_candidates(
    conn: asyncpg.Connection, p: SearchParams, vector_k: int, text_k: int
) -> EpisodeCandidates:
    """As db/retrieval.episode_candidates, over the events recorded by `p.now`, by the exact plan."""
    args: tuple[Any, ...] = (
        p.project_id,
        p.subject_id,
        p.vector,
        p.query,
        vector_k,
        p.max_lexemes,
        text_k,
        p.now,
        *_rank_args(p),
    )
    rows = await conn.fetch(_EPISODE_TEXTS[p.full_text_rank], *args)
    return EpisodeCandidates([chunk_row(r) for r in rows], None)


async def multi_hop(
    conn: asyncpg.Connection,
    p: SearchParams,
    entities: list[str],
    exclude_ids: list[str],
    per_entity: int,
    read_rows: int,
) -> list[tuple[str, FactRow]]:
    """As db/retrieval.multi_hop, at the instant `p.now`."""
    # The same parameters as db/retrieval.MULTI_HOP_SQL's: its $5 (now) is the instant here.
    rows = await conn.fetch(MULTI_HOP_SQL, *_multi_hop_args(p, entities, exclude_ids, per_entity, read_rows))
    return [(r["entity"], _fact_row(r)) for r in rows]


async def project_start(conn: asyncpg.Connection, project_id: str) -> datetime | None:
    """The earliest instant the project holds anything from: its creation (a key made for it), or
    the earliest recording of an event or fact (an import keeps a file's dates, which may be
    older); None when it holds nothing and has no key."""
    start = await conn.fetchval(
        "SELECT least((SELECT created_at FROM projects WHERE project_id = $1),"
        " (SELECT min(recorded_at) FROM events WHERE project_id = $1),"
        " (SELECT min(recorded_at) FROM facts WHERE project_id = $1))",
        project_id,
    )
    return cast(datetime | None, start)
