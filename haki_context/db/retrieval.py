"""The assembler's SQL: fact candidates (with blocking), episode candidates, multi-hop.

Hard filters live here, inside the statements, never after scoring: status
ACTIVE, the exact (project, subject), `valid_to` not passed and `valid_from`
not in the future, all against one `now` the caller passes to every statement.

Vector search plan, chosen by the statement's text (see "Statement texts"):
- a scope known to have a READY index of its own (`scope_vector_indexes`,
  built by db/scope_indexes.py once the scope is large): HNSW over that partial
  index, which holds the scope's rows only (the planner picks it because the
  text names the scope with constants, which imply the index's predicate), with
  `hnsw.iterative_scan = relaxed_order` for the remaining filters (validity,
  conflicts), over-fetched; for a scope past HAKI_IVF_INDEX_ROWS, united with the
  top 64 of its IVFFlat index (`ivfflat.probes` lists of the half-precision
  copies, ordered by inner product: the other operator is what makes the planner
  take the other index; the scan runs only where that index exists, a one-time
  `to_regclass` test), and the union re-sorted by exact distance. HNSW alone can miss a tight cluster of
  near-identical rows whole (its graph reaches the cluster through few edges),
  which neither a larger m or ef_search nor a larger over-fetch cures; the lists
  nearest the query hold such a cluster by construction (docs/retrieval.md);
- any other scope: an exact scan of the scope, ranked by the inner product of
  the half-precision copies of the vectors held in the scope's covering index
  (migration 0006: index-only; vectors are unit length, so this is the cosine
  order but for near-ties). The query's halfvec is computed once, in a CTE:
  written inline, the cast would run once per row.
The re-sort of the HNSW rows orders by `d + 0` on purpose: ordering by `d`
itself lets the planner trust the index's (relaxed, so wrong) order and end the
scan after k rows, which silently drops the over-fetch.

Statement texts: planning a candidates statement is costly (more so with every
partial index on its table; docs/performance.md), so they are written to be planned once per
connection (PostgreSQL's generic plan, which it keeps after five runs when it
costs no more than theirs). A plan made once cannot pick a scope's partial
index from parameters, hence two texts per statement: a shared one, the scope
as parameters, scanning exactly; and, for a scope the caller has seen with a
ready index of its own (`SearchParams.own_index_tables`, a hint learned from
`own_index`, which every statement returns), a text of the scope's own, the
HNSW scan naming it with constants. Only large scopes get texts of their own,
so the connections' statement caches hold few. A wrong hint costs speed, never
rows: without its index the HNSW text sorts the scope's rows exactly, and the
statement's `own_index` corrects the hint.

The full-text query uses the distinct lexemes of `to_tsvector('english',
query)` (the commonest English words gone, words stemmed), each quoted into a `tsquery` value:
user text is never parsed as tsquery syntax. Rows holding any of them are
ranked by `full_text_rank`: "idf" (default; a rare word such as a name weighs
more than "talk", which serves more of the right facts: docs/retrieval.md) or
"cover_density" (ts_rank_cd of their OR, the classic profile's). Rows are found through
the scoped lexemes (migration 0009: each lexeme prefixed by its scope's tag,
`scoped_lexemes`), so a scope's rows holding a word are one posting list of the index
whatever the table holds; ranks read `search_vector` itself.

Parameters: each statement's are named, in order, by a `Parameters` (db/parameters.py), its
legend: the text is written with the names and the arguments are built from values by name
(`statement_args`, the one place a call's values come from, db/as_of.py's too), so the two
agree. A full-text rank may take parameters of its own (`RANK_PARAMETERS`: PostgreSQL refuses a
parameter its text never references), so a candidates statement's list depends on its rank.
The three statements are also one object, `LIVE` (db/as_of.py's `AT_INSTANT` is the other).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any, Protocol

import asyncpg
import numpy as np

from .parameters import Parameters, Statement
from .scope_indexes import ivf_index_name

# The parameters of the statements below, in order (each statement's legend). The names of the
# values every statement of a call shares are SearchParams' fields (see statement_args); the
# others are the statement's own counts.

# The fact candidates statement (fact_candidates), then its rank's own (RANK_PARAMETERS).
FACT_PARAMETERS = (
    "project_id",  # the scope
    "subject_id",
    "vector",  # the query's embedding
    "query",  # the query's text, for full text
    "now",  # the call's instant: validity and the volatility horizons are tested at it
    "top_k",  # rows taken from the vector top and from the full-text top each
    "max_lexemes",  # most query lexemes searched
    "blocked_limit",  # most blocked facts listed
    "horizon_volatile_s",  # the VOLATILE horizon (s)
    "horizon_ephemeral_s",  # the EPHEMERAL horizon (s)
    "hnsw_fetch",  # the most rows taken from an HNSW scan before the re-sort (see _FETCH)
)

# The episode candidates statement (episode_candidates), then its rank's own (RANK_PARAMETERS).
EPISODE_PARAMETERS = (
    "project_id",  # the scope
    "subject_id",
    "vector",  # the query's embedding
    "query",  # the query's text, for full text
    "vector_k",  # rows taken from the vector top
    "max_lexemes",  # most query lexemes searched
    "text_k",  # rows taken from the full-text top (0: none)
    "hnsw_fetch",  # the most rows taken from an HNSW scan before the re-sort (see _FETCH)
)

# The multi-hop statement (MULTI_HOP_SQL); db/as_of.py's takes the same.
MULTI_HOP_PARAMETERS = Parameters(
    "project_id",  # the scope
    "subject_id",
    "vector",  # the query's embedding, for the rows' distance
    "entities",  # the entities followed, in order (text[])
    "now",  # the call's instant, as in the fact candidates
    "exclude_ids",  # facts already decided (uuid[])
    "per_entity",  # most facts served per entity
    "max_lexemes",  # most lexemes of an entity searched
    "horizon_volatile_s",  # the VOLATILE horizon (s)
    "horizon_ephemeral_s",  # the EPHEMERAL horizon (s)
    "read_rows",  # most rows read per entity before ranking
)

# A lexeme (SQL text) quoted into a one-lexeme tsquery: never parsed as tsquery syntax.
_QUOTED = """('''' || replace(replace({lexeme}, '\\', '\\\\'), '''', '''''') || '''')"""


def _tag(P: Parameters) -> str:
    """The scope's tag that prefixes its lexemes in the scoped full-text index (migration 0009)."""
    return f"haki_scope_tag({P.project_id}::text, {P.subject_id}::text)"


def scoped_lexemes(alias: str) -> str:
    """What the scoped full-text index holds for a row of `alias`."""
    return f"haki_scoped_lexemes({alias}.project_id, {alias}.subject_id, {alias}.search_vector)"


# The lexemes of a text that are searched, in order of first appearance: at most {limit},
# none over 2,000 bytes (the scoped index leaves those out, and a tagged one would pass
# tsquery's 2,046-byte limit of a word: the whole call would fail).
_TEXT_LEXEMES = """SELECT lexeme FROM unnest(to_tsvector('english', {text}))
    WHERE octet_length(lexeme) <= 2000 ORDER BY positions[1], lexeme LIMIT {limit}"""


def lexeme_queries(P: Parameters, text: str) -> str:
    """The searched lexemes of `text` (SQL), read once (at most max_lexemes): their OR as `q` (to
    match search_vector) and as `sq`, each prefixed by the scope's tag (to match scoped_lexemes);
    one row, NULLs when none."""
    return (
        "SELECT string_agg(" + _QUOTED.format(lexeme="lexeme") + ", ' | ')::tsquery AS q,"
        " string_agg(" + _QUOTED.format(lexeme=_tag(P) + " || lexeme") + ", ' | ')::tsquery AS sq"
        " FROM (" + _TEXT_LEXEMES.format(text=text, limit=P.max_lexemes) + ") lexemes"
    )


def query_lexemes(P: Parameters) -> str:
    """The query's searched lexemes one per row (at most max_lexemes), each with its one-lexeme
    tsquery (q) and its scoped one (sq)."""
    return (
        "SELECT lexeme, "
        + _QUOTED.format(lexeme="lexeme")
        + "::tsquery AS q, "
        + _QUOTED.format(lexeme=_tag(P) + " || lexeme")
        + "::tsquery AS sq\n    FROM ("
        + _TEXT_LEXEMES.format(text=f"{P.query}::text", limit=P.max_lexemes)
        + ") l\n"
    )


def _fact_live(P: Parameters) -> str:
    """A fact row the assembler may consider: active, and valid at `now`."""
    return f"""
    f.status = 'ACTIVE'
    AND (f.valid_to IS NULL OR f.valid_to > {P.now}) AND (f.valid_from IS NULL OR f.valid_from <= {P.now})
"""


def _fact_scope(P: Parameters) -> str:
    return f"f.project_id = {P.project_id} AND f.subject_id = {P.subject_id} AND {_fact_live(P)}"


def text_scope(P: Parameters, alias: str) -> str:
    """The scope where rows come from the scoped full-text index: a recheck only. With a plain `=`
    the planner ANDs the index's bitmap with a btree on the scope (a word's rows being unknown to
    its estimates): every row of a large subject, read for nothing, and with `project_id =` alone
    the same through the primary key once the project is a tenth of the table
    (docs/performance.md). Compared under COLLATE "C", the equality (the same on these deterministic
    columns) matches no index, whose collation is the column's; Citus still routes on it, as the
    parameter folds into a constant of the column's type (docs/scale-out.md)."""
    return f'{alias}.project_id = {P.project_id} COLLATE "C" AND {alias}.subject_id = {P.subject_id} COLLATE "C"'


def _expired(P: Parameters) -> str:
    """VOLATILE and EPHEMERAL facts expire `horizon` after coalesce(last_reinforced_at, valid_from,
    recorded_at), at `now`."""
    return f"""
    (f.volatility = 'VOLATILE' AND coalesce(f.last_reinforced_at, f.valid_from, f.recorded_at)
        + make_interval(secs => {P.horizon_volatile_s}) < {P.now})
    OR (f.volatility = 'EPHEMERAL' AND coalesce(f.last_reinforced_at, f.valid_from, f.recorded_at)
        + make_interval(secs => {P.horizon_ephemeral_s}) < {P.now})
"""


# What a fact candidate reads of its row (fact_row turns it into a FactRow).
FACT_COLUMN_NAMES = (
    "id",
    "predicate",
    "value",
    "confidence",
    "valid_from",
    "valid_to",
    "recorded_at",
    "last_reinforced_at",
    "source_event_ids",
    "volatility",
    "text",
)
FACT_COLUMNS = ", ".join(f"f.{c}" for c in FACT_COLUMN_NAMES)


def _chunk_scope(P: Parameters) -> str:
    return f"c.project_id = {P.project_id} AND c.subject_id = {P.subject_id}"


# Where an HNSW scan names its scope: the parameters in the shared text, constants in a scope's
# own (see "Statement texts"). NUL cannot occur in SQL text, so the markers are unambiguous.
_PROJECT, _SUBJECT = "\x00project\x00", "\x00subject\x00"
# The scope's IVFFlat index's name (a scope's own text only): its scan runs only where it exists.
_IVF_INDEX = "\x00ivf\x00"

# Rows taken from a scope's HNSW scan before the re-sort to the top k: HNSW misses more of
# the true top k as the scope grows, so the over-fetch grows with it, one row per 250 of the
# scope's rows, between 2k and the lesser of 6k and `most` (HAKI_HNSW_FETCH_ROWS). Past
# ef_search the scan iterates, and each row past it costs time for little recall
# (docs/performance.md).
_FETCH = "greatest(2 * {k}, least({most}, 6 * {k}, s.n / 250))"

# Rows taken from a scope's IVFFlat scan, a constant: with a parameter (k) PostgreSQL's plan made
# once for all runs guesses a tenth of the scope for the LIMIT, costs that scan at several
# times its custom plans' figure and keeps planning every call. The union is cut to k after,
# so past 64 the HNSW scan alone fills the rest.
_IVF_ROWS = 64


@dataclass(frozen=True)
class FullTextPart:
    """The full-text part of a candidates statement, for one rank (see FULL_TEXT_RANKS)."""

    ctes: str  # CTEs ending with a comma, placed after `size`
    top: str  # the body of the `fts` CTE: the full-text top k
    join: str  # joined after the candidates, providing `rank_expr`
    rank_expr: str


def _cover_density(P: Parameters, table: str, alias: str, *, scope: str, key: str, k: str) -> FullTextPart:
    """ts_rank_cd of the OR of the query's lexemes (the classic profile's rank): every matching row is read
    (it takes no parameter of its own)."""
    rank = f"ts_rank_cd({alias}.search_vector, tq.q)"
    return FullTextPart(
        ctes=f"tq AS ({lexeme_queries(P, f'{P.query}::text')}),",
        top=f"""SELECT {key.replace("@", alias + ".")} FROM {table} {alias}, tq
            WHERE {scope} AND {k} > 0 AND {scoped_lexemes(alias)} @@ tq.sq
            ORDER BY {rank} DESC, {key.replace("@", alias + ".")} LIMIT {k}""",
        join=", tq",
        rank_expr=f"CASE WHEN {alias}.search_vector @@ tq.q THEN {rank} ELSE 0 END",
    )


def _idf(P: Parameters, table: str, alias: str, *, scope: str, key: str, k: str) -> FullTextPart:
    """The share of the query's idf mass a row holds: each query lexeme found in the scope
    weighs ln(1 + (n - df + 0.5) / (df + 0.5)) (BM25's idf; df = the scope's rows holding
    it, n = the scope's size), a row ranks sum(weights it holds) / sum(all weights), 0..1.

    Bounded work in a large scope (reading every row of a common word is slow there:
    docs/performance.md): a lexeme listed in `scope_lexemes` (db/scope_lexemes.py: a large
    scope's lexemes held by `lexeme_rows`+ rows, refreshed in the background) takes its df from
    there and its rows are not read; the rows of any other lexeme are read up to `lexeme_rows`
    (the parameter of its own: below it df is exact; at it, df counts as that). The top k by
    text come from the rows read, each ranked by the lexemes read; every candidate's own score
    (`rank_expr`) counts all the query's lexemes from its tsvector. A scope smaller than
    `lexeme_rows` is ranked exactly."""
    cols = key.replace("@", "")
    return FullTextPart(
        ctes=f"""lex AS (
    SELECT l.lexeme, l.q, l.sq, k.df FROM ({query_lexemes(P)}) l
    LEFT JOIN scope_lexemes k ON k.project_id = {P.project_id} AND k.subject_id = {P.subject_id} AND k.table_name = '{table}'
        AND k.lexeme = l.lexeme
),
hits AS MATERIALIZED (
    SELECT l.lexeme, h.* FROM lex l
    CROSS JOIN LATERAL (SELECT {key.replace("@", alias + ".")} FROM {table} {alias}
                        WHERE l.df IS NULL AND {scope} AND {scoped_lexemes(alias)} @@ l.sq
                        LIMIT {P.lexeme_rows}) h
),
idf AS MATERIALIZED (
    SELECT d.lexeme, d.q, ln(1.0 + (greatest((SELECT n FROM size), d.df) - d.df + 0.5)::float8 / (d.df + 0.5)) AS w
    FROM (SELECT l.lexeme, l.q, coalesce(l.df, c.df, 0) AS df FROM lex l
          LEFT JOIN (SELECT lexeme, count(*) AS df FROM hits GROUP BY lexeme) c USING (lexeme)) d
    WHERE d.df > 0
),
lexical AS (
    SELECT {cols}, sum(i.w) AS s FROM hits h JOIN idf i USING (lexeme) GROUP BY {cols}
),""",
        top=f"SELECT {cols} FROM lexical WHERE {k} > 0 ORDER BY s DESC, {cols} LIMIT {k}",
        join="",
        # per candidate, from its own tsvector: cheaper than joining `lexical` back
        rank_expr=f"""coalesce((SELECT sum(i.w) FROM idf i WHERE {alias}.search_vector @@ i.q)
            / nullif((SELECT sum(w) FROM idf), 0), 0)::real""",
    )


# A rank builds its part from the statement's parameters, the table and its alias, the rows' scope
# (`scope`), their key columns (`key`, '@' standing for the alias) and the rendered k of its top.
class FullTextRank(Protocol):
    """How a full-text rank builds its part of a statement."""

    def __call__(self, P: Parameters, table: str, alias: str, *, scope: str, key: str, k: str) -> FullTextPart: ...


FULL_TEXT_RANKS: dict[str, FullTextRank] = {
    "cover_density": _cover_density,
    "idf": _idf,
}
# The parameters a rank's statements take after the others (the idf rank's rows per lexeme):
# a statement's parameter list depends on its rank, since PostgreSQL refuses one its text never
# references.
RANK_PARAMETERS: dict[str, tuple[str, ...]] = {"cover_density": (), "idf": ("lexeme_rows",)}


def _own_index_union(P: Parameters, table: str, alias: str, *, key: str, where: str, k: str) -> str:
    """A scope's vector top k through its own indexes (see "Vector search plan"): the HNSW scan,
    over-fetched, united with the IVFFlat scan's top _IVF_ROWS where that index exists, re-sorted
    by exact distance. `key`: the row's key columns, '@' standing for the alias; `where`: the
    rows either scan may return (one condition for both, so they never disagree on it)."""
    cols, plain = key.replace("@", alias + "."), key.replace("@", "")
    return f"""hnsw_scan AS MATERIALIZED (
    SELECT {cols}, {alias}.embedding <=> {P.vector} AS d FROM {table} {alias}
    WHERE {where}
    ORDER BY {alias}.embedding <=> {P.vector} LIMIT (SELECT fetch_rows FROM size)
),
ivf_scan AS MATERIALIZED (
    SELECT {cols}, {alias}.embedding <=> {P.vector} AS d FROM {table} {alias}
    WHERE to_regclass({_IVF_INDEX}) IS NOT NULL AND {where}
    ORDER BY {alias}.embedding_half <#> {P.vector}::vector::halfvec(384) LIMIT {_IVF_ROWS}
),
vec AS (
    SELECT {plain} FROM (SELECT {plain}, d FROM hnsw_scan UNION SELECT {plain}, d FROM ivf_scan) s
    ORDER BY d + 0, {plain} LIMIT {k}
),"""


def _fact_vector(P: Parameters, plan: str) -> str:
    """The facts' vector top k of a plan (see "Vector search plan"), as the CTE `vec`, after `size`."""
    if plan == "exact":
        return f"""half AS (SELECT {P.vector}::vector::halfvec(384) AS h),
vec AS (
    SELECT id FROM (
        SELECT f.id, f.embedding_half <#> (SELECT h FROM half) AS d FROM facts f
        WHERE {_fact_scope(P)} AND f.open_conflict_id IS NULL OFFSET 0) s
    ORDER BY d, id LIMIT {P.top_k}
),"""
    return _own_index_union(
        P,
        "facts",
        "f",
        key="@id",
        where=f"f.project_id = {_PROJECT} AND f.subject_id = {_SUBJECT} AND {_fact_live(P)} AND f.open_conflict_id IS NULL",
        k=P.top_k,
    )


def _chunk_vector(P: Parameters, plan: str) -> str:
    """The episode chunks' vector top k of a plan, as the CTE `vec`, after `size`."""
    if plan == "exact":
        return f"""half AS (SELECT {P.vector}::vector::halfvec(384) AS h),
vec AS (
    SELECT event_id, chunk FROM (
        SELECT c.event_id, c.chunk, c.embedding_half <#> (SELECT h FROM half) AS d FROM episode_chunks c
        WHERE {_chunk_scope(P)} OFFSET 0) s
    ORDER BY d, event_id, chunk LIMIT {P.vector_k}
),"""
    return _own_index_union(
        P,
        "episode_chunks",
        "c",
        key="@event_id, @chunk",
        where=f"c.project_id = {_PROJECT} AND c.subject_id = {_SUBJECT}",
        k=P.vector_k,
    )


def _size(P: Parameters, table: str, rows_column: str, k: str) -> str:
    """The CTE `size`: the scope's rows in `table` (n), the HNSW over-fetch (fetch_rows), and
    whether the scope has a ready index of its own there (ready)."""
    return f"""size AS (SELECT s.n, {_FETCH.format(k=k, most=P.hnsw_fetch)} AS fetch_rows, s.ready FROM (
    SELECT coalesce((SELECT {rows_column} FROM subjects WHERE project_id = {P.project_id} AND subject_id = {P.subject_id}), 0) AS n,
           EXISTS (SELECT 1 FROM scope_vector_indexes WHERE project_id = {P.project_id}
               AND subject_id = {P.subject_id} AND table_name = '{table}' AND ready_at IS NOT NULL) AS ready) s)"""


def _fact_candidates_sql(P: Parameters, rank: str, plan: str) -> str:
    """The fact candidates statement (parameters: FACT_PARAMETERS, then the rank's)."""
    lexical = FULL_TEXT_RANKS[rank](
        P,
        "facts",
        "f",
        scope=f"{text_scope(P, 'f')} AND {_fact_live(P)} AND f.open_conflict_id IS NULL",
        key="@id",
        k=P.top_k,
    )
    return f"""
WITH {_size(P, "facts", "fact_rows", k=P.top_k)},
{lexical.ctes}
{_fact_vector(P, plan)}
fts AS ({lexical.top}),
candidates AS (SELECT id FROM vec UNION SELECT id FROM fts),
-- One read of the table for the blocked rows and their total (the window counts before the
-- LIMIT): each reference of `facts` costs planning time per index on it, the scopes'
-- partial HNSW indexes included.
blocked AS (
    SELECT {FACT_COLUMNS}, count(*) OVER () AS total FROM facts f
    WHERE {_fact_scope(P)} AND f.open_conflict_id IS NOT NULL
    ORDER BY f.id LIMIT {P.blocked_limit}
)
SELECT 'C' AS role, {FACT_COLUMNS},
       f.embedding <=> {P.vector} AS distance,
       {lexical.rank_expr} AS full_text,
       ({_expired(P)}) AS expired,
       0::bigint AS blocked_total, (SELECT ready FROM size) AS own_index
FROM candidates k JOIN facts f ON f.project_id = {P.project_id} AND f.id = k.id{lexical.join}
UNION ALL
SELECT 'B', {", ".join(f"b.{c}" for c in FACT_COLUMN_NAMES)}, NULL, NULL, false, b.total,
       (SELECT ready FROM size)
FROM blocked b
"""


# What an episode candidate reads of its chunk. `whole_turn`: the chunk is a turn and its event's
# only chunk (one turn recorded as one event), so a fact citing that event cites exactly this
# turn (core/context/packing.py, CITED_BY_FACT). An event's chunks are numbered from 0 without gaps, so
# that is chunk 0 with no chunk 1: one primary-key probe per turn candidate.
CHUNK_COLUMNS = """c.event_id, c.chunk, c.kind, c.occurred_at, c.excerpt, c.text, c.is_turn, c.speaker,
       c.is_turn AND c.chunk = 0
         AND NOT EXISTS (SELECT FROM episode_chunks o WHERE o.project_id = c.project_id AND o.event_id = c.event_id
                                                        AND o.chunk = 1) AS whole_turn"""


def chunk_row(r: asyncpg.Record) -> ChunkRow:
    """An episode candidate from a row that selected CHUNK_COLUMNS, distance and full_text."""
    return ChunkRow(
        event_id=str(r["event_id"]),
        chunk=r["chunk"],
        kind=r["kind"],
        occurred_at=r["occurred_at"],
        excerpt=r["excerpt"],
        text=r["text"],
        is_turn=r["is_turn"],
        whole_turn=r["whole_turn"],
        speaker=r["speaker"],
        distance=r["distance"],
        full_text=r["full_text"],
    )


def _episode_candidates_sql(P: Parameters, rank: str, plan: str) -> str:
    """The episode candidates statement (parameters: EPISODE_PARAMETERS, then the rank's)."""
    lexical = FULL_TEXT_RANKS[rank](
        P, "episode_chunks", "c", scope=text_scope(P, "c"), key="@event_id, @chunk", k=P.text_k
    )
    return f"""
WITH {_size(P, "episode_chunks", "chunk_rows", k=P.vector_k)},
{lexical.ctes}
{_chunk_vector(P, plan)}
fts AS ({lexical.top}),
candidates AS (SELECT event_id, chunk FROM vec UNION SELECT event_id, chunk FROM fts)
SELECT {CHUNK_COLUMNS},
       c.embedding <=> {P.vector} AS distance, {lexical.rank_expr} AS full_text, (SELECT ready FROM size) AS own_index
FROM candidates k JOIN episode_chunks c ON c.project_id = {P.project_id} AND c.event_id = k.event_id AND c.chunk = k.chunk{lexical.join}
"""


def _literal(text: str) -> str:
    """`text` as an SQL string constant. The pool sets standard_conforming_strings, so a
    backslash is an ordinary character and doubling quotes is the whole escaping."""
    if "\x00" in text:
        raise ValueError("an SQL constant cannot hold NUL")
    return "'" + text.replace("'", "''") + "'"


@dataclass(frozen=True)
class _CandidateTexts:
    """A candidates statement of one table and rank: the shared text (exact scan, the scope as
    parameters) and the template of a scope's own text (HNSW, the scope marked, named by
    candidates_text); both take the same parameters."""

    shared: Statement
    own: Statement


def _candidate_texts(table: str, rank: str) -> _CandidateTexts:
    names, build = {
        "facts": (FACT_PARAMETERS, _fact_candidates_sql),
        "episode_chunks": (EPISODE_PARAMETERS, _episode_candidates_sql),
    }[table]
    P = Parameters(*names, *RANK_PARAMETERS[rank])
    return _CandidateTexts(Statement(P, build(P, rank, "exact")), Statement(P, build(P, rank, "hnsw")))


# By (table, rank).
_TEXTS = {
    (table, rank): _candidate_texts(table, rank) for table in ("facts", "episode_chunks") for rank in FULL_TEXT_RANKS
}


def _multi_hop_sql(P: Parameters) -> str:
    """An entity's facts are read up to read_rows rows, in index order, then ranked: ranking every
    fact that names a common entity reads the heap, then the out-of-line tsvector, of each
    (docs/performance.md). An entity that is a common lexeme of the scope (listed in
    scope_lexemes, db/scope_lexemes.py) is not followed at all: thousands of facts share it."""
    return f"""
SELECT e.entity, e.ord, {FACT_COLUMNS},
       f.embedding <=> {P.vector} AS distance, m.full_text
FROM unnest({P.entities}::text[]) WITH ORDINALITY AS e(entity, ord)
CROSS JOIN LATERAL (
    SELECT h.id, ts_rank_cd(h.search_vector, tq.q) AS full_text
    FROM ({lexeme_queries(P, "e.entity")}) tq
    CROSS JOIN LATERAL (
        SELECT f.id, f.search_vector FROM facts f
        WHERE {text_scope(P, "f")} AND {_fact_live(P)} AND f.open_conflict_id IS NULL
          AND NOT ({_expired(P)})
          AND f.id <> ALL({P.exclude_ids}::uuid[]) AND {scoped_lexemes("f")} @@ tq.sq
          AND NOT EXISTS (SELECT 1 FROM scope_lexemes k WHERE k.project_id = {P.project_id} AND k.subject_id = {P.subject_id}
                            AND k.table_name = 'facts'
                            AND k.lexeme = ANY (tsvector_to_array(to_tsvector('english', e.entity))))
        LIMIT {P.read_rows}
    ) h
    ORDER BY 2 DESC, h.id
    LIMIT {P.per_entity}
) m
JOIN facts f ON f.project_id = {P.project_id} AND f.id = m.id
ORDER BY e.ord, m.full_text DESC, f.id
"""


_MULTI_HOP = Statement(MULTI_HOP_PARAMETERS, _multi_hop_sql(MULTI_HOP_PARAMETERS))
MULTI_HOP_SQL = _MULTI_HOP.text


def statement_texts() -> dict[str, Statement]:
    """Every statement of this module with its parameters, by "statement/rank/plan" (a scope's
    own texts as their template, the scope marked): for checks and tools."""
    texts = {}
    for (table, rank), t in _TEXTS.items():
        texts[f"{table}/{rank}/exact"] = t.shared
        texts[f"{table}/{rank}/hnsw"] = t.own
    texts["multi_hop"] = _MULTI_HOP
    return texts


@dataclass(slots=True)  # not frozen: a frozen __init__ is slower, and it runs hundreds of times a call (core/packet.py)
class FactRow:
    """A fact as the assembler sees it: what packing and tracing need, never the embedding."""

    id: str
    predicate: str
    value: Any
    confidence: float | None
    valid_from: datetime | None
    valid_to: datetime | None
    recorded_at: datetime
    last_reinforced_at: datetime | None
    source_event_ids: tuple[str, ...]
    volatility: str
    text: str
    distance: float | None
    full_text: float | None


@dataclass(frozen=True)
class FactCandidates:
    candidates: list[tuple[FactRow, bool]]  # (row, volatility expired)
    blocked: list[FactRow]  # members of OPEN conflict sets, at most `blocked_limit`
    blocked_total: int
    own_index: bool | None  # whether the scope has a ready index of its own (None: no row said)


@dataclass(slots=True)  # not frozen: a frozen __init__ is slower, and it runs hundreds of times a call (core/packet.py)
class ChunkRow:
    event_id: str
    chunk: int
    kind: str
    occurred_at: datetime
    excerpt: str
    text: str
    is_turn: bool
    whole_turn: bool  # a turn that is its event's only chunk
    speaker: str | None
    distance: float
    full_text: float


@dataclass(frozen=True)
class EpisodeCandidates:
    chunks: list[ChunkRow]
    own_index: bool | None  # as in FactCandidates


@dataclass(frozen=True)
class SearchParams:
    """What every retrieval statement of one call shares. A field that is a statement parameter
    has the parameter's name (see statement_args)."""

    project_id: str
    subject_id: str
    vector: np.ndarray
    query: str
    now: datetime
    max_lexemes: int
    lexeme_rows: int  # rows read per query lexeme by the idf rank (see _idf)
    use_scope_index: bool  # False: the exact scan (the shared text) even where the scope has its own index
    hnsw_fetch: int  # the most rows taken from an HNSW scan before re-sorting (see _FETCH)
    horizon_volatile_s: float
    horizon_ephemeral_s: float
    full_text_rank: str  # a key of FULL_TEXT_RANKS (HAKI_FULL_TEXT_RANK)
    # Tables where the scope was last seen with a ready index of its own: their statements use
    # the scope's own text (see "Statement texts"); elsewhere the shared text, exact scan.
    own_index_tables: frozenset[str] = frozenset()


# The values every statement of a call shares: SearchParams' fields of these names.
_SHARED_VALUES = frozenset(
    {
        "project_id",
        "subject_id",
        "vector",
        "query",
        "now",
        "max_lexemes",
        "lexeme_rows",
        "hnsw_fetch",
        "horizon_volatile_s",
        "horizon_ephemeral_s",
    }
)


def statement_args(parameters: Parameters, p: SearchParams, **counts: Any) -> tuple[Any, ...]:
    """The arguments of one statement for one call, db/as_of.py's included: of the values every
    statement of the call shares (_SHARED_VALUES, from `p`) those the statement declares, and the
    statement's own `counts` (top_k, entities...), each of which it must declare; a declared
    parameter given by neither is refused."""
    if not _SHARED_VALUES.isdisjoint(counts):
        both = sorted(_SHARED_VALUES.intersection(counts))
        raise ValueError(f"{both} come from the call's SearchParams, not from a statement's counts")
    values = {name: getattr(p, name) for name in parameters.names if name in _SHARED_VALUES}
    values.update(counts)
    return parameters.args(values)


def _candidates(table: str, p: SearchParams) -> tuple[str, Parameters]:
    """The candidates statement of `table` for this call and its parameters: the scope's own text
    (HNSW over its index, the scope named with constants) if it is known to have an index and may
    use it, else the shared text (exact scan)."""
    texts = _TEXTS[table, p.full_text_rank]
    if p.use_scope_index and table in p.own_index_tables:
        return _own_text(table, p.full_text_rank, p.project_id, p.subject_id), texts.own.parameters
    return texts.shared.text, texts.shared.parameters


def candidates_text(table: str, p: SearchParams) -> str:
    """The candidates statement of `table` for this call: the scope's own text (HNSW over its
    index, the scope named with constants) if it is known to have an index and may use it,
    else the shared text (exact scan)."""
    return _candidates(table, p)[0]


@lru_cache(maxsize=1024)
def _own_text(table: str, rank: str, project_id: str, subject_id: str) -> str:
    """A scope's own text, made once per process while the scope keeps being asked about (a
    few kB each; the index name's hash and three replaces every call otherwise)."""
    return (
        _TEXTS[table, rank]
        .own.text.replace(_PROJECT, _literal(project_id))
        .replace(_SUBJECT, _literal(subject_id))
        .replace(_IVF_INDEX, _literal(ivf_index_name(table, project_id, subject_id)))
    )


def fact_row(r: asyncpg.Record) -> FactRow:
    """A fact from a row that selected FACT_COLUMNS, distance and full_text."""
    return FactRow(
        id=str(r["id"]),
        predicate=r["predicate"],
        value=r["value"],
        confidence=r["confidence"],
        valid_from=r["valid_from"],
        valid_to=r["valid_to"],
        recorded_at=r["recorded_at"],
        last_reinforced_at=r["last_reinforced_at"],
        source_event_ids=tuple(str(i) for i in r["source_event_ids"]),
        volatility=r["volatility"],
        text=r["text"],
        distance=r["distance"],
        full_text=r["full_text"],
    )


async def warm(conn: asyncpg.Connection, p: SearchParams) -> None:
    """Plan each retrieval statement once on a new connection, without running it (EXPLAIN).

    A backend's first plan of these statements reads the catalog entries of the tables and
    of every index on them (each scope's partial HNSW index included) and their statistics,
    which would otherwise slow a server's first call (docs/performance.md). EXPLAIN is a statement of its own, so the statements' own plan
    cache (five plans for their values, then one for all) is left as it was."""
    facts, facts_parameters = _candidates("facts", p)
    episodes, episodes_parameters = _candidates("episode_chunks", p)
    for text, args in (
        (facts, statement_args(facts_parameters, p, top_k=1, blocked_limit=1)),
        (episodes, statement_args(episodes_parameters, p, vector_k=1, text_k=1)),
        (
            MULTI_HOP_SQL,
            statement_args(MULTI_HOP_PARAMETERS, p, entities=["warm"], exclude_ids=[], per_entity=1, read_rows=1),
        ),
    ):
        await conn.fetch("EXPLAIN " + text, *args)


async def fact_candidates(conn: asyncpg.Connection, p: SearchParams, top_k: int, blocked_limit: int) -> FactCandidates:
    """Phase 1 and 2 in one statement: the union of vector and full-text top-k, scored
    components for each, plus the scope's facts held in OPEN conflict sets."""
    text, parameters = _candidates("facts", p)
    rows = await conn.fetch(text, *statement_args(parameters, p, top_k=top_k, blocked_limit=blocked_limit))
    return fact_candidates_of(rows, bool(rows[0]["own_index"]) if rows else None)


def fact_candidates_of(rows: list[asyncpg.Record], own_index: bool | None) -> FactCandidates:
    """A fact candidates statement's rows read: the candidates (role C, with whether each is past
    its volatility horizon) and the blocked facts (role B, with how many there are in all)."""
    candidates = [(fact_row(r), bool(r["expired"])) for r in rows if r["role"] == "C"]
    blocked_rows = [r for r in rows if r["role"] == "B"]
    total = int(blocked_rows[0]["blocked_total"]) if blocked_rows else 0
    return FactCandidates(candidates, [fact_row(r) for r in blocked_rows], total, own_index)


async def episode_candidates(
    conn: asyncpg.Connection, p: SearchParams, vector_k: int, text_k: int
) -> EpisodeCandidates:
    """Episode chunks of the scope: the vector top-k, plus the full-text top-k when `text_k` > 0."""
    text, parameters = _candidates("episode_chunks", p)
    rows = await conn.fetch(text, *statement_args(parameters, p, vector_k=vector_k, text_k=text_k))
    return EpisodeCandidates([chunk_row(r) for r in rows], bool(rows[0]["own_index"]) if rows else None)


async def multi_hop(
    conn: asyncpg.Connection,
    p: SearchParams,
    entities: list[str],
    *,
    exclude_ids: list[str],
    per_entity: int,
    read_rows: int,
) -> list[tuple[str, FactRow]]:
    """For each entity in order, up to `per_entity` servable facts matching it, by full-text rank then id
    among the first `read_rows` that match; none for an entity listed as common in the scope."""
    args = statement_args(
        MULTI_HOP_PARAMETERS, p, entities=entities, exclude_ids=exclude_ids, per_entity=per_entity, read_rows=read_rows
    )
    rows = await conn.fetch(MULTI_HOP_SQL, *args)
    return [(r["entity"], fact_row(r)) for r in rows]


class MultiHop(Protocol):
    """The one-hop statement's function (`multi_hop` of this module or of db/as_of.py)."""

    def __call__(
        self,
        conn: asyncpg.Connection,
        p: SearchParams,
        entities: list[str],
        *,
        exclude_ids: list[str],
        per_entity: int,
        read_rows: int,
    ) -> Awaitable[list[tuple[str, FactRow]]]: ...


@dataclass(frozen=True)
class CandidateStatements:
    """The assembler's three statements as one set, chosen once per call: `LIVE` (this module's)
    or db/as_of.py's `AT_INSTANT` (the memory at a past instant). The same signatures as this
    module's functions, the same rows."""

    name: str
    fact_candidates: Callable[[asyncpg.Connection, SearchParams, int, int], Awaitable[FactCandidates]]
    episode_candidates: Callable[[asyncpg.Connection, SearchParams, int, int], Awaitable[EpisodeCandidates]]
    multi_hop: MultiHop


LIVE = CandidateStatements("live", fact_candidates, episode_candidates, multi_hop)
