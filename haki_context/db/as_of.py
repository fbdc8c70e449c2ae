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

Each statement's parameters are named, in order, by a `Parameters` (db/parameters.py), its legend;
the values of a call come from db/retrieval.statement_args, as the live statements' do. `now` is
the instant here. The three statements are also one object, `AT_INSTANT` (db/retrieval.LIVE is
the other).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import cast

import asyncpg

from .parameters import Parameters, Statement
from .retrieval import (
    CHUNK_COLUMNS,
    FACT_COLUMN_NAMES,
    FACT_COLUMNS,
    FULL_TEXT_RANKS,
    MULTI_HOP_PARAMETERS,
    RANK_PARAMETERS,
    CandidateStatements,
    EpisodeCandidates,
    FactCandidates,
    FactRow,
    SearchParams,
    chunk_row,
    fact_candidates_of,
    fact_row,
    lexeme_queries,
    query_lexemes,
    scoped_lexemes,
    statement_args,
    text_scope,
)

# The parameters of the statements below, in order (each statement's legend). As in
# db/retrieval.py, the values every statement of a call shares are named as SearchParams' fields.

# The fact candidates statement at the instant (fact_candidates), then its rank's own
# (RANK_PARAMETERS). As db/retrieval.FACT_PARAMETERS, less the HNSW over-fetch (no HNSW scan here).
FACT_PARAMETERS = (
    "project_id",  # the scope
    "subject_id",
    "vector",  # the query's embedding
    "query",  # the query's text, for full text
    "now",  # the instant (asOf): every hard filter is tested at it
    "top_k",  # rows taken from the vector top and from the full-text top each
    "max_lexemes",  # most query lexemes searched
    "blocked_limit",  # most blocked facts listed
    "horizon_volatile_s",  # the VOLATILE horizon (s)
    "horizon_ephemeral_s",  # the EPHEMERAL horizon (s)
)

# The episode candidates statement at the instant (episode_candidates), then its rank's own
# (RANK_PARAMETERS). As db/retrieval.EPISODE_PARAMETERS, the instant in place of the over-fetch.
EPISODE_PARAMETERS = (
    "project_id",  # the scope
    "subject_id",
    "vector",  # the query's embedding
    "query",  # the query's text, for full text
    "vector_k",  # rows taken from the vector top
    "max_lexemes",  # most query lexemes searched
    "text_k",  # rows taken from the full-text top (0: none)
    "now",  # the instant (asOf): the events recorded after it are left out
)

# The multi-hop statement at the instant (MULTI_HOP_SQL): db/retrieval.MULTI_HOP_PARAMETERS, its
# `now` being the instant.


def _valid_to(a: str) -> str:
    """The validTo a fact had while ACTIVE."""
    return f"(CASE WHEN {a}.end_reason = 'SUPERSEDED' THEN {a}.active_valid_to ELSE {a}.valid_to END)"


def _valid_at(P: Parameters, a: str) -> str:
    return (
        f"({a}.valid_from IS NULL OR {a}.valid_from <= {P.now})"
        f" AND ({_valid_to(a)} IS NULL OR {_valid_to(a)} > {P.now})"
    )


def _live_at(P: Parameters) -> str:
    """A fact row ACTIVE and valid at the instant, whatever its status now: recorded by then, not
    ended by then (an unknown end, NULL with a reason set, is never after it), valid then."""
    return f"f.recorded_at <= {P.now} AND (f.end_reason IS NULL OR f.ended_at > {P.now}) AND " + _valid_at(P, "f")


# The rows a statement at the instant ranks come in two parts, so that each part reads an index:
# - facts ACTIVE now, recorded by then (not in `too_new`), valid then, not blocked then: through
#   the indexes over ACTIVE facts that the live statements read (facts_scope_vectors,
#   facts_scoped_search), with the same conditions the live statements test, at the instant;
# - facts that have ended since the instant (`ended`: ended_at after it, migration 0014's index), few.
# too_new: the scope's facts recorded after the instant (facts_scope_recorded), few.
def _too_new(P: Parameters) -> str:
    return f"""too_new AS MATERIALIZED (
    SELECT f.id FROM facts f WHERE f.project_id = {P.project_id} AND f.subject_id = {P.subject_id} AND f.recorded_at > {P.now}
)"""


def _blocked_ids(P: Parameters) -> str:
    """The subject's facts in a conflict set open at the instant, having joined it by then."""
    return f"""blocked_ids AS MATERIALIZED (
    SELECT DISTINCT m.fact_id AS id FROM conflict_sets c
    JOIN conflict_members m ON m.project_id = c.project_id AND m.conflict_id = c.id
    WHERE c.project_id = {P.project_id} AND c.subject_id = {P.subject_id} AND c.created_at <= {P.now}
      AND (c.resolved_at IS NULL OR c.resolved_at > {P.now}) AND m.added_at <= {P.now}
)"""


def _ended(P: Parameters) -> str:
    return f"""ended AS MATERIALIZED (
    SELECT f.id, f.project_id, f.subject_id, f.search_vector, f.embedding_half, f.volatility,
           f.reinforced_at, f.valid_from, f.recorded_at
    FROM facts f
    WHERE f.project_id = {P.project_id} AND f.subject_id = {P.subject_id} AND f.ended_at > {P.now} AND f.recorded_at <= {P.now}
      AND {_valid_at(P, "f")} AND f.id NOT IN (SELECT id FROM blocked_ids)
)"""


def _active_at(P: Parameters, a: str) -> str:
    """A fact ACTIVE now that counts at the instant (see above)."""
    return f"""{a}.status = 'ACTIVE'
    AND ({a}.valid_from IS NULL OR {a}.valid_from <= {P.now}) AND ({a}.valid_to IS NULL OR {a}.valid_to > {P.now})
    AND {a}.id NOT IN (SELECT id FROM too_new) AND {a}.id NOT IN (SELECT id FROM blocked_ids)"""


def _expired_at(P: Parameters, a: str) -> str:
    """VOLATILE and EPHEMERAL facts past their horizon at the instant, from the latest reinforcement by then."""
    anchor = f"coalesce((SELECT max(r) FROM unnest({a}.reinforced_at) r WHERE r <= {P.now}), {a}.valid_from, {a}.recorded_at)"
    return f"""({a}.volatility = 'VOLATILE' AND {anchor} + make_interval(secs => {P.horizon_volatile_s}) < {P.now})
    OR ({a}.volatility = 'EPHEMERAL' AND {anchor} + make_interval(secs => {P.horizon_ephemeral_s}) < {P.now})"""


def _text_active_at(P: Parameters) -> str:
    return f"{text_scope(P, 'f')} AND {_active_at(P, 'f')}"


def _lexical(P: Parameters, rank: str) -> tuple[str, str, str, str]:
    """The full-text part at the instant, for one rank (as db/retrieval.FULL_TEXT_RANKS, over both
    parts): (CTEs ending with a comma, the top k's body, what is joined to the candidates, the rank)."""
    if rank == "idf":
        return (
            f"""lex AS (
    SELECT l.lexeme, l.q, l.sq, k.df FROM ({query_lexemes(P)}) l
    LEFT JOIN scope_lexemes k ON k.project_id = {P.project_id} AND k.subject_id = {P.subject_id} AND k.table_name = 'facts'
        AND k.lexeme = l.lexeme
),
hits AS MATERIALIZED (
    SELECT l.lexeme, h.id FROM lex l
    CROSS JOIN LATERAL (SELECT f.id FROM facts f
                        WHERE l.df IS NULL AND {_text_active_at(P)} AND {scoped_lexemes("f")} @@ l.sq
                        LIMIT {P.lexeme_rows}) h
    UNION ALL
    SELECT l.lexeme, e.id FROM lex l JOIN ended e ON l.df IS NULL AND {scoped_lexemes("e")} @@ l.sq
),
idf AS MATERIALIZED (
    SELECT d.lexeme, d.q, ln(1.0 + (greatest((SELECT n FROM size), d.df) - d.df + 0.5)::float8 / (d.df + 0.5)) AS w
    FROM (SELECT l.lexeme, l.q, coalesce(l.df, c.df, 0) AS df FROM lex l
          LEFT JOIN (SELECT lexeme, count(*) AS df FROM hits GROUP BY lexeme) c USING (lexeme)) d
    WHERE d.df > 0
),
lexical AS (SELECT id, sum(i.w) AS s FROM hits h JOIN idf i USING (lexeme) GROUP BY id),""",
            f"SELECT id FROM lexical WHERE {P.top_k} > 0 ORDER BY s DESC, id LIMIT {P.top_k}",
            "",
            """coalesce((SELECT sum(i.w) FROM idf i WHERE f.search_vector @@ i.q)
            / nullif((SELECT sum(w) FROM idf), 0), 0)::real""",
        )
    rank_of = "ts_rank_cd({a}.search_vector, tq.q)"
    return (
        f"tq AS ({lexeme_queries(P, f'{P.query}::text')}),",
        f"""SELECT id FROM (
            SELECT f.id, {rank_of.format(a="f")} AS r FROM facts f, tq
            WHERE {_text_active_at(P)} AND {P.top_k} > 0 AND {scoped_lexemes("f")} @@ tq.sq
            UNION ALL
            SELECT e.id, {rank_of.format(a="e")} FROM ended e, tq WHERE {P.top_k} > 0 AND {scoped_lexemes("e")} @@ tq.sq
        ) x ORDER BY r DESC, id LIMIT {P.top_k}""",
        ", tq",
        f"CASE WHEN f.search_vector @@ tq.q THEN {rank_of.format(a='f')} ELSE 0 END",
    )


def _fact_candidates_sql(P: Parameters, rank: str) -> str:
    """The fact candidates statement at the instant (parameters: FACT_PARAMETERS, then the rank's)."""
    ctes, top, join, rank_expr = _lexical(P, rank)
    return f"""
WITH {_too_new(P)},
{_blocked_ids(P)},
{_ended(P)},
size AS (SELECT greatest(coalesce((SELECT fact_rows FROM subjects WHERE project_id = {P.project_id} AND subject_id = {P.subject_id}), 0)
                         - (SELECT count(*) FROM too_new), 0) AS n),
{ctes}
half AS (SELECT {P.vector}::vector::halfvec(384) AS h),
vec AS (
    SELECT id FROM (
        (SELECT f.id, f.embedding_half <#> (SELECT h FROM half) AS d FROM facts f
         WHERE f.project_id = {P.project_id} AND f.subject_id = {P.subject_id} AND {_active_at(P, "f")} OFFSET 0)
        UNION ALL
        (SELECT e.id, e.embedding_half <#> (SELECT h FROM half) FROM ended e)) s
    ORDER BY d, id LIMIT {P.top_k}
),
fts AS ({top}),
candidates AS (SELECT id FROM vec UNION SELECT id FROM fts),
blocked AS (
    SELECT {FACT_COLUMNS}, count(*) OVER () AS total FROM facts f
    WHERE f.project_id = {P.project_id} AND f.id IN (SELECT id FROM blocked_ids) AND f.subject_id = {P.subject_id} AND {_live_at(P)}
    ORDER BY f.id LIMIT {P.blocked_limit}
)
SELECT 'C' AS role, {FACT_COLUMNS},
       f.embedding <=> {P.vector} AS distance,
       {rank_expr} AS full_text,
       ({_expired_at(P, "f")}) AS expired,
       0::bigint AS blocked_total
FROM candidates k JOIN facts f ON f.project_id = {P.project_id} AND f.id = k.id{join}
UNION ALL
SELECT 'B', {", ".join(f"b.{c}" for c in FACT_COLUMN_NAMES)}, NULL, NULL, false, b.total
FROM blocked b
"""


# An episode chunk whose event was recorded by the instant: the events recorded after it
# (too_new_events, migration 0014's index) are few, their chunks are left out.
_SEEN = "{a}.event_id NOT IN (SELECT id FROM too_new_events)"


def _episode_candidates_sql(P: Parameters, rank: str) -> str:
    """The episode candidates statement at the instant (parameters: EPISODE_PARAMETERS, then the rank's)."""
    lexical = FULL_TEXT_RANKS[rank](
        P,
        "episode_chunks",
        "c",
        scope=f"{text_scope(P, 'c')} AND {_SEEN.format(a='c')}",
        key="@event_id, @chunk",
        k=P.text_k,
    )
    return f"""
WITH too_new_events AS MATERIALIZED (
    SELECT e.id FROM events e WHERE e.project_id = {P.project_id} AND e.subject_id = {P.subject_id} AND e.recorded_at > {P.now}
),
size AS (SELECT greatest(coalesce((SELECT chunk_rows FROM subjects WHERE project_id = {P.project_id} AND subject_id = {P.subject_id}), 0)
                         - (SELECT count(*) FROM episode_chunks c WHERE c.project_id = {P.project_id}
                            AND c.event_id IN (SELECT id FROM too_new_events)), 0) AS n),
{lexical.ctes}
half AS (SELECT {P.vector}::vector::halfvec(384) AS h),
vec AS (
    SELECT event_id, chunk FROM (
        SELECT c.event_id, c.chunk, c.embedding_half <#> (SELECT h FROM half) AS d FROM episode_chunks c
        WHERE c.project_id = {P.project_id} AND c.subject_id = {P.subject_id} AND {_SEEN.format(a="c")} OFFSET 0) s
    ORDER BY d, event_id, chunk LIMIT {P.vector_k}
),
fts AS ({lexical.top}),
candidates AS (SELECT event_id, chunk FROM vec UNION SELECT event_id, chunk FROM fts)
SELECT {CHUNK_COLUMNS},
       c.embedding <=> {P.vector} AS distance, {lexical.rank_expr} AS full_text
FROM candidates k JOIN episode_chunks c ON c.project_id = {P.project_id} AND c.event_id = k.event_id AND c.chunk = k.chunk{lexical.join}
"""


def _multi_hop_sql(P: Parameters) -> str:
    """As db/retrieval.MULTI_HOP_SQL, at the instant; an entity's facts that have ended since are
    read whole (few)."""
    common = f"""NOT EXISTS (SELECT 1 FROM scope_lexemes k WHERE k.project_id = {P.project_id} AND k.subject_id = {P.subject_id}
                            AND k.table_name = 'facts'
                            AND k.lexeme = ANY (tsvector_to_array(to_tsvector('english', e.entity))))"""
    return f"""
WITH {_too_new(P)},
{_blocked_ids(P)},
{_ended(P)}
SELECT e.entity, e.ord, {FACT_COLUMNS},
       f.embedding <=> {P.vector} AS distance, m.full_text
FROM unnest({P.entities}::text[]) WITH ORDINALITY AS e(entity, ord)
CROSS JOIN LATERAL (
    SELECT h.id, ts_rank_cd(h.search_vector, tq.q) AS full_text
    FROM ({lexeme_queries(P, "e.entity")}) tq
    CROSS JOIN LATERAL (
        (SELECT f.id, f.search_vector FROM facts f
         WHERE {_text_active_at(P)} AND NOT ({_expired_at(P, "f")})
           AND f.id <> ALL({P.exclude_ids}::uuid[]) AND {scoped_lexemes("f")} @@ tq.sq AND {common}
         LIMIT {P.read_rows})
        UNION ALL
        (SELECT x.id, x.search_vector FROM ended x
         WHERE NOT ({_expired_at(P, "x")}) AND x.id <> ALL({P.exclude_ids}::uuid[])
           AND {scoped_lexemes("x")} @@ tq.sq AND {common})
    ) h
    ORDER BY 2 DESC, h.id
    LIMIT {P.per_entity}
) m
JOIN facts f ON f.project_id = {P.project_id} AND f.id = m.id
ORDER BY e.ord, m.full_text DESC, f.id
"""


def _statement(names: tuple[str, ...], rank: str, build: Callable[[Parameters, str], str]) -> Statement:
    P = Parameters(*names, *RANK_PARAMETERS[rank])
    return Statement(P, build(P, rank))


_FACT_TEXTS = {rank: _statement(FACT_PARAMETERS, rank, _fact_candidates_sql) for rank in FULL_TEXT_RANKS}
_EPISODE_TEXTS = {rank: _statement(EPISODE_PARAMETERS, rank, _episode_candidates_sql) for rank in FULL_TEXT_RANKS}
_MULTI_HOP = Statement(MULTI_HOP_PARAMETERS, _multi_hop_sql(MULTI_HOP_PARAMETERS))
MULTI_HOP_SQL = _MULTI_HOP.text


def _project_start_sql(P: Parameters) -> str:
    return (
        f"SELECT least((SELECT created_at FROM projects WHERE project_id = {P.project_id}),"
        f" (SELECT min(recorded_at) FROM events WHERE project_id = {P.project_id}),"
        f" (SELECT min(recorded_at) FROM facts WHERE project_id = {P.project_id}))"
    )


# The project's earliest instant (project_start).
_PROJECT_START_PARAMETERS = Parameters("project_id")
_PROJECT_START = Statement(_PROJECT_START_PARAMETERS, _project_start_sql(_PROJECT_START_PARAMETERS))


def statement_texts() -> dict[str, Statement]:
    """Every statement of this module with its parameters, by "statement/rank/plan" (one plan,
    exact): for checks and tools."""
    texts = {}
    for rank in FULL_TEXT_RANKS:
        texts[f"facts/{rank}/exact"] = _FACT_TEXTS[rank]
        texts[f"episode_chunks/{rank}/exact"] = _EPISODE_TEXTS[rank]
    texts["multi_hop"] = _MULTI_HOP
    texts["project_start"] = _PROJECT_START
    return texts


async def fact_candidates(conn: asyncpg.Connection, p: SearchParams, top_k: int, blocked_limit: int) -> FactCandidates:
    """As db/retrieval.fact_candidates, at the instant `p.now`, by the exact plan."""
    statement = _FACT_TEXTS[p.full_text_rank]
    args = statement_args(statement.parameters, p, top_k=top_k, blocked_limit=blocked_limit)
    rows = await conn.fetch(statement.text, *args)
    return fact_candidates_of(rows, None)


async def episode_candidates(
    conn: asyncpg.Connection, p: SearchParams, vector_k: int, text_k: int
) -> EpisodeCandidates:
    """As db/retrieval.episode_candidates, over the events recorded by `p.now`, by the exact plan."""
    statement = _EPISODE_TEXTS[p.full_text_rank]
    rows = await conn.fetch(statement.text, *statement_args(statement.parameters, p, vector_k=vector_k, text_k=text_k))
    return EpisodeCandidates([chunk_row(r) for r in rows], None)


async def multi_hop(
    conn: asyncpg.Connection,
    p: SearchParams,
    entities: list[str],
    *,
    exclude_ids: list[str],
    per_entity: int,
    read_rows: int,
) -> list[tuple[str, FactRow]]:
    """As db/retrieval.multi_hop, at the instant `p.now`."""
    args = statement_args(
        MULTI_HOP_PARAMETERS, p, entities=entities, exclude_ids=exclude_ids, per_entity=per_entity, read_rows=read_rows
    )
    rows = await conn.fetch(MULTI_HOP_SQL, *args)
    return [(r["entity"], fact_row(r)) for r in rows]


AT_INSTANT = CandidateStatements("as_of", fact_candidates, episode_candidates, multi_hop)


async def project_start(conn: asyncpg.Connection, project_id: str) -> datetime | None:
    """The earliest instant the project holds anything from: its creation (a key made for it), or
    the earliest recording of an event or fact (an import keeps a file's dates, which may be
    older); None when it holds nothing and has no key."""
    start = await conn.fetchval(_PROJECT_START.text, *_PROJECT_START.parameters.args({"project_id": project_id}))
    return cast(datetime | None, start)
