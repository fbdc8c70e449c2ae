"""Ready for Citus (docs/scale-out.md, "Ready for Citus"): every table is classified as distributed by
`project_id`, reference or local to the coordinator; every key of a distributed table holds
`project_id`; and every statement the server sends, captured while a workload runs every operation,
stays in one project (routed to one shard group) unless it is named below as spanning projects,
with the reason.

The statement rule, checked on PostgreSQL's own parse tree (pglast): each reference of a distributed
table needs `project_id = <parameter or constant>`, directly or through equalities with the
`project_id` of other references (a join, a correlated subquery); all of them must reach the same
value, or be equated to each other, so no statement joins two projects. `IS NOT DISTINCT FROM`,
`= ANY(...)`, a condition under OR and a column under COLLATE do not count: Citus routes a statement
to one shard on `<column> = <constant>` only (a parameter's COLLATE folds into its constant).
"""

from __future__ import annotations

import ast as python_ast
import importlib
import itertools
import pkgutil
import re
import sys
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

import asyncpg
import orjson
import pglast
import pytest
from conftest import ProjectClient, StatementLog, client_for, make_settings
from contextlib_helpers import FULL_SELECTION, assert_fact, context, record, with_settings
from pglast import ast
from pglast.enums.nodes import JoinType
from pglast.enums.parsenodes import A_Expr_Kind, SetOperation
from pglast.enums.primnodes import BoolExprType
from test_migrations import NOT_TENANT_DATA, with_database

import haki_context.db
from haki_context.core.context.assembler import warm_connections
from haki_context.core.embedding.embedder import Embedder
from haki_context.core.embedding.space import EmbedderMismatch, check_embedding_space, reembed
from haki_context.core.history.traces import prune
from haki_context.core.memory.portability import import_lines
from haki_context.core.serving import jobs
from haki_context.core.serving import keys as serving_keys
from haki_context.core.serving.auth import Caller
from haki_context.core.serving.runtime import Runtime
from haki_context.core.serving.scope_indexes import build_pending
from haki_context.db import as_of, migrate, retrieval, scope_indexes
from haki_context.db import jobs as db_jobs
from haki_context.db import keys as db_keys
from haki_context.db.health import connection_limit
from haki_context.db.pool import init_connection, keep_session

# --- how each table is placed on Citus

# Distributed by project_id (hash), all in one colocation group: a project's rows of every table
# live on one shard group, so a statement about one project runs on one node.
DISTRIBUTED = frozenset(
    {
        "subjects",
        "events",
        "episode_chunks",
        "facts",
        "conflict_sets",
        "conflict_members",
        "context_traces",
        "trace_decisions",
        "settings_records",
        "erasures",
        "scope_vector_indexes",
        "scope_lexemes",
    }
)
# Reference tables (a copy on every node): small, and read where no project is known yet (a key
# tells the project, through the unique hash of the key).
REFERENCE = frozenset({"projects", "api_keys"})
# Local to the coordinator: the database's own records, holding no project's data.
LOCAL = frozenset({"schema_migrations", "server_meta", "background_job_runs"})

# Keys of distributed tables without project_id, each with why it is there.
KEY_EXCEPTIONS: dict[str, str] = {}


@dataclass(frozen=True)
class Spanning:
    """A statement allowed to break the one-project rule: its name, the substrings that pick it out
    (all of `markers`, none of `excluding`), and why it may span projects. An entry whose reason is
    `TO FIX: ...` names a statement to change; its `fix` (old text, new text) is checked to be enough."""

    name: str
    markers: tuple[str, ...]
    reason: str
    excluding: tuple[str, ...] = ()
    fix: tuple[str, str] | None = None

    def matches(self, sql: str) -> bool:
        return all(m in sql for m in self.markers) and not any(m in sql for m in self.excluding)


SPANNING: tuple[Spanning, ...] = (
    Spanning(
        "traces.prune_batch: the traces",
        ("DELETE FROM context_traces WHERE (project_id, id) IN (",),
        "retention deletes traces by age across every project (a background pass, batched)",
    ),
    Spanning(
        "traces.prune_batch: their decisions",
        ("DELETE FROM trace_decisions d USING unnest($1::text[], $2::uuid[])",),
        "retention deletes the decisions of the traces it deleted, of every project",
    ),
    Spanning(
        "scope_indexes.pending",
        ("FROM subjects s", "CROSS JOIN LATERAL (VALUES ('facts', s.fact_rows)"),
        "scope-index bookkeeping: the builder lists the large scopes of every project",
    ),
    Spanning(
        "scope_indexes._ready_with_options",
        ("FROM scope_vector_indexes i", "JOIN subjects s ON s.project_id = i.project_id", "$1::text IS NULL OR"),
        "scope-index bookkeeping: the builder lists the indexed scopes of every project",
    ),
    Spanning(
        "scope_indexes.drop_orphans",
        ("SELECT project_id, subject_id, table_name FROM scope_vector_indexes",),
        "scope-index bookkeeping: the indexes every project's entries own",
    ),
    Spanning(
        "scope_lexemes.stale",
        ("FROM scope_vector_indexes i", "i.lexemes_min_df IS DISTINCT FROM $1"),
        "scope-index bookkeeping: the indexed scopes of every project whose common lexemes are stale",
    ),
    Spanning(
        "meta.holds_vectors",
        ("SELECT EXISTS (SELECT 1 FROM facts) OR EXISTS (SELECT 1 FROM episode_chunks)",),
        "the embedding space is the database's: whether any project holds vectors",
    ),
    Spanning(
        "meta.count_rows",
        ("SELECT count(*) FROM ",),
        "re-embedding (`haki-context reembed`) counts every project's rows",
        excluding=("WHERE",),
    ),
    Spanning(
        "meta.text_batch",
        ("ORDER BY project_id, ", "$1::text IS NULL OR (project_id, "),
        "re-embedding walks every project's rows in key order",
    ),
)

# --- the statement check


Term = tuple[str, str]  # ("param", "$1"), ("const", "'p'"), ("col", "<reference id>.<column>")


@dataclass
class _Rel:
    """One reference of a table, CTE, subquery or function in a statement."""

    id: str
    alias: str
    table: str | None  # the table referenced (None: a CTE, a subquery, a function, a catalog)
    columns: frozenset[str] | None  # what it holds (None: unknown)
    level: int


@dataclass
class _Level:
    """One query level (a SELECT, or a statement's target): its references, then the enclosing level."""

    id: int
    outer: _Level | None
    rels: list[_Rel] = field(default_factory=list)


@dataclass(frozen=True)
class _Equality:
    left: Term
    right: Term
    level: int  # the level whose condition it is: it restricts that level's references only
    restricts: frozenset[str] | None = None  # of those, the ones it restricts (a join's ON); None: all


def _column(rel: _Rel, name: str) -> Term:
    return ("col", f"{rel.id}.{name}")


def _names(nodes: Sequence[Any] | None) -> frozenset[str] | None:
    """The names of a column list (String nodes, or column definitions); None when there is none."""
    if not nodes:
        return None
    return frozenset((n.sval or "") if isinstance(n, ast.String) else str(getattr(n, "colname", "")) for n in nodes)


def _outputs(node: Any) -> frozenset[str] | None:
    """The column names a statement gives (a SELECT's target list, a RETURNING list); None: unknown."""
    if isinstance(node, ast.SelectStmt):
        if node.op != SetOperation.SETOP_NONE:
            return _outputs(node.larg)
        targets: Sequence[Any] = node.targetList or ()
    elif isinstance(node, ast.InsertStmt | ast.UpdateStmt | ast.DeleteStmt):
        targets = (node.returningClause.exprs or ()) if node.returningClause else ()
    else:
        return None
    names = set()
    for target in targets:
        if target.name:
            names.add(target.name)
        elif isinstance(target.val, ast.ColumnRef):
            last = (target.val.fields or (None,))[-1]
            if not isinstance(last, ast.String):
                return None  # a star
            names.add(last.sval or "")
        elif isinstance(target.val, ast.FuncCall) and target.val.funcname:
            names.add(target.val.funcname[-1].sval or "")
    return frozenset(names)


def _conjuncts(node: Any) -> Iterator[Any]:
    """The terms of a condition's top-level AND (a term under OR or NOT restricts nothing alone)."""
    if isinstance(node, ast.BoolExpr) and node.boolop == BoolExprType.AND_EXPR:
        for arg in node.args or ():
            yield from _conjuncts(arg)
    elif node is not None:
        yield node


def _equated(node: Any) -> Iterator[tuple[Any, Any]]:
    """The pairs a condition says are equal: `a = b`, and `(a, b) = (c, d)` pairwise."""
    if not (isinstance(node, ast.A_Expr) and node.kind == A_Expr_Kind.AEXPR_OP):
        return
    if [n.sval for n in node.name or ()] != ["="]:
        return
    left, right = node.lexpr, node.rexpr
    if isinstance(left, ast.RowExpr) and isinstance(right, ast.RowExpr):
        yield from zip(left.args or (), right.args or ())
    else:
        yield left, right


_STATEMENTS = (ast.SelectStmt, ast.InsertStmt, ast.UpdateStmt, ast.DeleteStmt)


def _statements_within(node: Any) -> Iterator[Any]:
    """The statements nested in an expression (sublinks), not descending into them."""
    if isinstance(node, tuple | list):
        for item in node:
            yield from _statements_within(item)
    elif isinstance(node, _STATEMENTS):
        yield node
    elif isinstance(node, ast.Node):
        for name in getattr(type(node), "__slots__", ()):
            yield from _statements_within(getattr(node, name))


class _Walk:
    """The references and equalities of one statement, then what breaks the rule."""

    def __init__(self, catalog: Mapping[str, Sequence[str]]) -> None:
        self.catalog = catalog
        self.rels: list[_Rel] = []
        self.equalities: list[_Equality] = []
        self._ids = itertools.count()

    # the walk

    def level(self, outer: _Level | None) -> _Level:
        return _Level(next(self._ids), outer)

    def add(self, level: _Level, alias: str, table: str | None, columns: frozenset[str] | None) -> _Rel:
        rel = _Rel(str(next(self._ids)), alias, table, columns, level.id)
        level.rels.append(rel)
        self.rels.append(rel)
        return rel

    def add_relation(self, level: _Level, node: ast.RangeVar, ctes: Mapping[str, frozenset[str] | None]) -> _Rel:
        name = node.relname or ""
        alias = node.alias.aliasname if node.alias and node.alias.aliasname else name
        if node.schemaname is None and name in ctes:
            return self.add(level, alias, None, ctes[name])
        if node.schemaname in (None, "public") and name in self.catalog:
            return self.add(level, alias, name, frozenset(self.catalog[name]))
        return self.add(level, alias, None, None)  # a catalog, another schema's

    def statement(self, node: Any, outer: _Level | None, ctes: Mapping[str, frozenset[str] | None]) -> _Level | None:
        if isinstance(node, ast.SelectStmt):
            return self.select(node, outer, ctes)
        if isinstance(node, ast.InsertStmt):
            self.insert(node, outer, ctes)
        elif isinstance(node, ast.UpdateStmt | ast.DeleteStmt):
            self.update_or_delete(node, outer, ctes)
        elif isinstance(node, ast.ExplainStmt):
            return self.statement(node.query, outer, ctes)
        elif isinstance(node, ast.IndexStmt) and node.relation is not None:
            level = self.level(outer)
            self.add_relation(level, node.relation, ctes)
            self.conditions([node.whereClause], level)
        return None  # anything else (transactions, settings, DROP INDEX) references no table's rows

    def with_(
        self, clause: ast.WithClause | None, outer: _Level | None, ctes: Mapping[str, frozenset[str] | None]
    ) -> Mapping[str, frozenset[str] | None]:
        if clause is None:
            return ctes
        visible = dict(ctes)
        for cte in clause.ctes or ():
            if clause.recursive:
                visible[cte.ctename] = None
            self.statement(cte.ctequery, outer, visible)
            visible[cte.ctename] = _names(cte.aliascolnames) or _outputs(cte.ctequery)
        return visible

    def select(self, node: ast.SelectStmt, outer: _Level | None, ctes: Mapping[str, frozenset[str] | None]) -> _Level:
        ctes = self.with_(node.withClause, outer, ctes)
        level = self.level(outer)
        if node.op != SetOperation.SETOP_NONE:
            self.select(node.larg, outer, ctes)  # type: ignore[arg-type]
            self.select(node.rarg, outer, ctes)  # type: ignore[arg-type]
            self.expressions((node.sortClause, node.limitCount, node.limitOffset), level, ctes)
            return level
        for item in node.fromClause or ():
            self.from_item(item, level, ctes)
        self.conditions([node.whereClause], level)
        self.expressions(
            (
                node.targetList,
                node.whereClause,
                node.havingClause,
                node.groupClause,
                node.sortClause,
                node.distinctClause,
                node.windowClause,
                node.limitCount,
                node.limitOffset,
                node.valuesLists,
            ),
            level,
            ctes,
        )
        return level

    def from_item(self, item: Any, level: _Level, ctes: Mapping[str, frozenset[str] | None]) -> None:
        if isinstance(item, ast.RangeVar):
            self.add_relation(level, item, ctes)
        elif isinstance(item, ast.RangeSubselect):
            self.statement(item.subquery, level if item.lateral else level.outer, ctes)
            alias = item.alias
            columns = _names(alias.colnames if alias else None) or _outputs(item.subquery)
            self.add(level, (alias.aliasname or "") if alias else "", None, columns)
        elif isinstance(item, ast.RangeFunction):
            self.expressions(item.functions, level, ctes)
            alias = item.alias
            columns = _names(alias.colnames if alias else None) or _names(item.coldeflist)
            self.add(level, (alias.aliasname or "") if alias else "", None, columns)
        elif isinstance(item, ast.JoinExpr):
            start = len(level.rels)
            self.from_item(item.larg, level, ctes)
            middle = len(level.rels)
            self.from_item(item.rarg, level, ctes)
            # An ON condition restricts the rows of the join's inner sides only (an outer join keeps
            # every row of its preserved side).
            inner = {
                JoinType.JOIN_INNER: level.rels[start:],
                JoinType.JOIN_LEFT: level.rels[middle:],
                JoinType.JOIN_RIGHT: level.rels[start:middle],
            }.get(JoinType.JOIN_INNER if item.jointype is None else item.jointype, [])
            restricts = frozenset(r.id for r in inner)
            self.conditions([item.quals], level, restricts)
            self.expressions(item.quals, level, ctes)
            for using in item.usingClause or ():
                for left in level.rels[start:middle]:
                    for right in level.rels[middle:]:
                        if using.sval in (left.columns or ()) and using.sval in (right.columns or ()):
                            self.equalities.append(
                                _Equality(_column(left, using.sval), _column(right, using.sval), level.id, restricts)
                            )

    def insert(self, node: ast.InsertStmt, outer: _Level | None, ctes: Mapping[str, frozenset[str] | None]) -> None:
        ctes = self.with_(node.withClause, outer, ctes)
        level = self.level(outer)
        assert node.relation is not None
        target = self.add_relation(level, node.relation, ctes)
        source = node.selectStmt
        names = [c.name for c in node.cols] if node.cols else list(self.catalog.get(target.table or "", ()))
        value: Term | None = None
        if target.table is not None and "project_id" in names and isinstance(source, ast.SelectStmt):
            i = names.index("project_id")
            if source.valuesLists:
                values = {self.term(row[i], level) for row in source.valuesLists}
                self.expressions(source.valuesLists, level, ctes)
                value = values.pop() if len(values) == 1 else None
            elif source.op == SetOperation.SETOP_NONE:
                selected = self.select(source, outer, ctes)
                targets = source.targetList or ()
                value = self.term(targets[i].val, selected) if i < len(targets) else None
            else:
                self.statement(source, outer, ctes)
        elif source is not None:
            self.statement(source, outer, ctes)
        if value is not None:
            self.equalities.append(_Equality(_column(target, "project_id"), value, level.id))
        if node.onConflictClause is not None:
            self.add(level, "excluded", None, target.columns)
            self.expressions((node.onConflictClause.targetList, node.onConflictClause.whereClause), level, ctes)
        self.expressions(node.returningClause, level, ctes)

    def update_or_delete(
        self, node: ast.UpdateStmt | ast.DeleteStmt, outer: _Level | None, ctes: Mapping[str, frozenset[str] | None]
    ) -> None:
        ctes = self.with_(node.withClause, outer, ctes)
        level = self.level(outer)
        assert node.relation is not None
        self.add_relation(level, node.relation, ctes)
        items = node.fromClause if isinstance(node, ast.UpdateStmt) else node.usingClause
        for item in items or ():
            self.from_item(item, level, ctes)
        self.conditions([node.whereClause], level)
        assignments = node.targetList if isinstance(node, ast.UpdateStmt) else None
        self.expressions((assignments, node.whereClause, node.returningClause), level, ctes)

    def expressions(self, node: Any, level: _Level, ctes: Mapping[str, frozenset[str] | None]) -> None:
        for statement in _statements_within(node):
            self.statement(statement, level, ctes)

    def conditions(self, quals: list[Any], level: _Level, restricts: frozenset[str] | None = None) -> None:
        for qual in quals:
            for conjunct in _conjuncts(qual):
                for left, right in _equated(conjunct):
                    a, b = self.term(left, level), self.term(right, level)
                    if a is not None and b is not None:
                        self.equalities.append(_Equality(a, b, level.id, restricts))

    def term(self, node: Any, level: _Level) -> Term | None:
        while isinstance(node, ast.TypeCast):
            node = node.arg
        # A value's COLLATE folds into the constant Citus prunes on; a column's leaves no column.
        if isinstance(node, ast.CollateClause):
            value = node.arg
            while isinstance(value, ast.TypeCast):
                value = value.arg
            if not isinstance(value, ast.ParamRef | ast.A_Const):
                return None
            node = value
        if isinstance(node, ast.ParamRef):
            return ("param", f"${node.number}")
        if isinstance(node, ast.A_Const):
            return None if node.isnull else ("const", repr(node.val))
        if isinstance(node, ast.ColumnRef):
            return self.column_ref(node, level)
        return None

    def column_ref(self, node: ast.ColumnRef, level: _Level) -> Term | None:
        fields = node.fields or ()
        names = [f.sval or "" for f in fields if isinstance(f, ast.String)]
        if not names or len(names) != len(fields):
            return None  # a star
        column, qualifier = names[-1], names[-2] if len(names) > 1 else None
        scope: _Level | None = level
        while scope is not None:
            if qualifier is not None:
                found = [r for r in scope.rels if r.alias == qualifier]
            else:
                found = [r for r in scope.rels if r.columns is not None and column in r.columns]
            if len(found) == 1:
                return _column(found[0], column)
            if found:
                return None  # ambiguous
            scope = scope.outer
        return None

    # the rule

    def anchors(self) -> dict[Term, set[Term]]:
        """The parameters and constants each column is equal to, by the conditions of its own level
        (a condition restricts the rows of its level's references, never an enclosing level's)."""
        level_of = {r.id: r.level for r in self.rels}
        found: dict[Term, set[Term]] = {}
        changed = True
        while changed:
            changed = False
            for eq in self.equalities:
                for x, y in ((eq.left, eq.right), (eq.right, eq.left)):
                    rel = x[1].split(".", 1)[0]
                    if x[0] != "col" or level_of[rel] != eq.level or not (eq.restricts is None or rel in eq.restricts):
                        continue
                    new = ({y} if y[0] != "col" else found.get(y, set())) - found.get(x, set())
                    if new:
                        found.setdefault(x, set()).update(new)
                        changed = True
        return found

    def joined(self) -> dict[Term, Term]:
        """The project_id columns equated to one another (in any level), as union-find roots."""
        parent: dict[Term, Term] = {}

        def root(t: Term) -> Term:
            while parent.setdefault(t, t) != t:
                t = parent[t]
            return t

        for eq in self.equalities:
            if eq.left[0] == eq.right[0] == "col":
                parent[root(eq.left)] = root(eq.right)
        return {t: root(t) for t in list(parent)}

    def problems(self) -> list[str]:
        distributed = [r for r in self.rels if r.table in DISTRIBUTED]
        if not distributed:
            return []
        problems = []
        local = sorted({r.table for r in self.rels if r.table in LOCAL})
        if local:
            problems.append(f"joins the coordinator-local {', '.join(local)} with distributed tables")
        anchors, roots = self.anchors(), self.joined()
        project = {r.id: _column(r, "project_id") for r in distributed}
        anchored = []
        for r in distributed:
            if anchors.get(project[r.id]):
                anchored.append(r)
            else:
                problems.append(
                    f"{_described(r)}: no project_id = <parameter or constant>, directly or through a join on project_id"
                )
        for a, b in itertools.combinations(anchored, 2):
            of_a, of_b = anchors[project[a.id]], anchors[project[b.id]]
            joined = project[a.id] in roots and roots[project[a.id]] == roots.get(project[b.id])
            if not (joined or _may_be_equal(of_a, of_b)):
                values = ", ".join(sorted(t[1] for t in of_a | of_b))
                problems.append(f"{_described(a)} and {_described(b)}: project_id of two projects ({values})")
        return list(dict.fromkeys(problems))


def _described(rel: _Rel) -> str:
    if rel.table is None or rel.alias == rel.table:
        return rel.table or rel.alias
    return f"{rel.table} {rel.alias}"


def _may_be_equal(a: set[Term], b: set[Term]) -> bool:
    """Whether two sets of values a project_id is equal to may be one project: they share one, or one
    is a constant and the other a parameter (a scope's own statement text names its project as a
    constant and binds the same project to the parameter); two parameters, or two constants, differ."""
    kinds_a, kinds_b = {t[0] for t in a}, {t[0] for t in b}
    return bool(a & b) or ("const" in kinds_a and "param" in kinds_b) or ("param" in kinds_a and "const" in kinds_b)


def check_statement(sql: str, catalog: Mapping[str, Sequence[str]]) -> list[str]:
    """What in `sql` breaks the one-project rule (empty: every distributed table it references is
    kept to one project, the same one)."""
    problems = []
    for raw in pglast.parse_sql(sql):
        walk = _Walk(catalog)
        walk.statement(raw.stmt, None, {})
        problems += walk.problems()
    return problems


@dataclass(frozen=True)
class Report:
    """A statement that breaks the rule and is named nowhere, with what breaks it."""

    source: str
    sql: str
    problems: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.source}: {'; '.join(self.problems)}\n{self.sql.strip()}"


def unexplained(
    statements: Mapping[str, str], catalog: Mapping[str, Sequence[str]], spanning: Sequence[Spanning] = SPANNING
) -> tuple[list[Report], set[str]]:
    """The statements (sql -> where it came from) that break the rule and are not named in `spanning`
    (or whose entry's fix would not be enough), and the names of the entries of `spanning` that named one."""
    reports: list[Report] = []
    used: set[str] = set()
    for sql, source in statements.items():
        problems = check_statement(sql, catalog)
        if not problems:
            continue
        named = [s for s in spanning if s.matches(sql)]
        used.update(s.name for s in named)
        if not named:
            reports.append(Report(source, sql, tuple(problems)))
        for entry in named:
            if entry.fix is not None and (left := check_statement(sql.replace(*entry.fix), catalog)):
                reports.append(Report(f"{source}, after the fix of {entry.name!r}", sql, tuple(left)))
    return reports, used


# --- the checker, on statements made for it


@pytest.fixture(scope="module")
async def catalog(migrated: str) -> dict[str, tuple[str, ...]]:
    """Each table of the migrated schema with its columns, in order."""
    conn = await asyncpg.connect(migrated)
    try:
        rows = await conn.fetch(
            "SELECT table_name, array_agg(column_name::text ORDER BY ordinal_position) AS columns"
            " FROM information_schema.columns WHERE table_schema = 'public' GROUP BY table_name"
        )
    finally:
        await conn.close()
    return {r["table_name"]: tuple(r["columns"]) for r in rows}


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM facts WHERE project_id = $1 AND subject_id = $2",
        "SELECT f.id FROM facts f JOIN conflict_members m ON m.project_id = f.project_id AND m.fact_id = f.id"
        " WHERE f.project_id = $1",
        "SELECT f.id FROM facts f JOIN conflict_members m ON m.fact_id = f.id WHERE f.project_id = $1"
        " AND m.project_id = $1",
        "SELECT c.id, ARRAY(SELECT m.fact_id FROM conflict_members m WHERE m.project_id = c.project_id"
        " AND m.conflict_id = c.id) FROM conflict_sets c WHERE c.project_id = 'p'",
        "WITH t AS (DELETE FROM context_traces WHERE project_id = $1 RETURNING id)"
        " DELETE FROM trace_decisions d USING t WHERE d.project_id = $1 AND d.trace_id = t.id",
        "INSERT INTO facts (project_id, id) VALUES ($1, $2)",
        "INSERT INTO trace_decisions (project_id, trace_id, ord) SELECT $1::text, $2, t.n FROM unnest($3::int[]) t(n)",
        "INSERT INTO subjects (project_id, subject_id) VALUES ($1, $2)"
        " ON CONFLICT (project_id, subject_id) DO UPDATE SET fact_rows = subjects.fact_rows + 1",
        "UPDATE facts f SET superseded_by = t.by FROM unnest($2::uuid[], $3::uuid[]) AS t(id, by)"
        " WHERE f.project_id = $1 AND f.id = t.id",
        "SELECT * FROM facts WHERE (project_id, id) = ($1, $2)",
        'SELECT * FROM facts f WHERE f.project_id = $1 COLLATE "C"',  # the full-text scope (db/retrieval.py)
        "SELECT f.id FROM facts f LEFT JOIN conflict_members m ON m.project_id = $1 AND m.fact_id = f.id"
        " WHERE f.project_id = $1",
        "CREATE INDEX CONCURRENTLY x ON facts USING hnsw (embedding vector_cosine_ops)"
        " WHERE project_id = 'p' AND subject_id = 's'",
        "SELECT project_id FROM api_keys WHERE key_hash = $1",  # a reference table
        "SELECT job FROM background_job_runs",  # a local table
        "SELECT pg_advisory_xact_lock(hashtextextended($1 || chr(31) || $2, 0))",
    ],
)
async def test_a_statement_kept_to_one_project_passes(sql: str, catalog: dict[str, tuple[str, ...]]) -> None:
    assert check_statement(sql, catalog) == []


@pytest.mark.parametrize(
    ("sql", "problem"),
    [
        ("SELECT * FROM facts WHERE subject_id = $1", "facts: no project_id"),
        (
            "SELECT f.id FROM facts f JOIN conflict_members m ON m.fact_id = f.id WHERE f.project_id = $1",
            "conflict_members m: no project_id = <parameter or constant>, directly or through a join",
        ),
        (
            "SELECT f.id FROM facts f JOIN conflict_members m ON m.fact_id = f.id WHERE f.project_id = $1"
            " AND m.project_id = $2",
            "facts f and conflict_members m: project_id of two projects ($1, $2)",
        ),
        ("SELECT * FROM facts f WHERE f.project_id IS NOT DISTINCT FROM $1", "facts f: no project_id"),
        ('SELECT * FROM facts f WHERE f.project_id COLLATE "C" = $1', "facts f: no project_id"),
        ("SELECT * FROM facts WHERE project_id = ANY($1::text[])", "facts: no project_id"),
        ("SELECT * FROM facts WHERE project_id = $1 OR subject_id = $2", "facts: no project_id"),
        (
            "SELECT c.id FROM conflict_sets c WHERE c.subject_id = $2"
            " AND EXISTS (SELECT 1 FROM facts f WHERE f.project_id = $1 AND f.id = c.kept_fact_id)",
            "conflict_sets c: no project_id",
        ),
        (
            "SELECT c.id FROM conflict_sets c, (SELECT project_id FROM facts) f WHERE c.project_id = f.project_id",
            "facts: no project_id",
        ),
        ("INSERT INTO facts (id, subject_id) VALUES ($1, $2)", "facts: no project_id"),
        (
            "DELETE FROM trace_decisions d USING unnest($1::text[]) AS t(p) WHERE d.project_id = t.p",
            "trace_decisions d: no project_id",
        ),
        (
            "UPDATE facts SET status = 'RETRACTED' WHERE id = $1 RETURNING (SELECT count(*) FROM events)",
            "events: no project_id",
        ),
        (
            "SELECT f.id FROM facts f, server_meta m WHERE f.project_id = $1",
            "joins the coordinator-local server_meta",
        ),
        ("CREATE INDEX x ON facts (subject_id) WHERE subject_id = 's'", "facts: no project_id"),
        (
            "SELECT f.id FROM facts f LEFT JOIN conflict_members m ON f.project_id = $1 AND m.project_id = f.project_id",
            "facts f: no project_id",
        ),
        (
            "SELECT c.id FROM conflict_sets c JOIN facts f ON f.project_id = 'q' AND f.id = c.kept_fact_id"
            " WHERE c.project_id = 'p'",
            "conflict_sets c and facts f: project_id of two projects",
        ),
    ],
)
async def test_a_statement_that_leaves_its_project_is_flagged(
    sql: str, problem: str, catalog: dict[str, tuple[str, ...]]
) -> None:
    problems = check_statement(sql, catalog)
    assert any(p.startswith(problem) for p in problems), problems


async def test_a_statement_named_as_spanning_passes_and_any_other_is_reported(
    catalog: dict[str, tuple[str, ...]],
) -> None:
    named = Spanning("by age", ("WHERE created_at < $1",), "retention")
    statements = {
        "DELETE FROM context_traces WHERE created_at < $1": "retention",
        "SELECT * FROM facts WHERE subject_id = $1": "a bad statement",
        "SELECT * FROM facts WHERE project_id = $1": "a good statement",
    }
    reports, used = unexplained(statements, catalog, [named])
    assert [(r.source, r.problems) for r in reports] == [
        (
            "a bad statement",
            ("facts: no project_id = <parameter or constant>, directly or through a join on project_id",),
        )
    ]
    assert used == {"by age"}
    assert "SELECT * FROM facts WHERE subject_id = $1" in str(reports[0])
    # An entry to fix: its fix must make the statement pass.
    to_fix = Spanning("scope", ("IS NOT DISTINCT FROM",), "TO FIX", fix=("IS NOT DISTINCT FROM", "="))
    enough = "SELECT * FROM facts WHERE project_id IS NOT DISTINCT FROM $1"
    not_enough = "SELECT * FROM facts f JOIN events e ON e.id = f.id WHERE f.project_id IS NOT DISTINCT FROM $1"
    reports, used = unexplained(dict.fromkeys([enough, not_enough], "sent"), catalog, [to_fix])
    assert [r.sql for r in reports] == [not_enough] and used == {"scope"}


# --- the page that says how to distribute the database


def test_the_scale_out_page_places_every_table_and_names_every_spanning_statement() -> None:
    page = Path(__file__).resolve().parent.parent / "docs" / "scale-out.md"
    section = page.read_text(encoding="utf-8").split("## Ready for Citus", 1)[1].split("\n## ", 1)[0]
    assert set(re.findall(r"create_distributed_table\('(\w+)'", section)) == DISTRIBUTED
    assert set(re.findall(r"create_reference_table\('(\w+)'", section)) == REFERENCE
    assert sorted(t for t in LOCAL if f"`{t}`" not in section) == []
    names = {re.split(r"[:,]", s.name)[0] for s in SPANNING}
    assert sorted(n for n in names if f"`{n}`" not in section) == [], "spanning statements the page does not name"


# --- the keys


async def _public_tables(conn: asyncpg.Connection) -> set[str]:
    rows = await conn.fetch(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE'"
    )
    return {r["table_name"] for r in rows}


def test_the_local_tables_are_those_that_hold_no_project_data() -> None:
    assert LOCAL == NOT_TENANT_DATA
    assert not (DISTRIBUTED & REFERENCE) and not (DISTRIBUTED & LOCAL) and not (REFERENCE & LOCAL)


async def test_every_table_is_distributed_reference_or_local(migrated: str) -> None:
    # A new table fails here until it is placed (and docs/scale-out.md says how).
    conn = await asyncpg.connect(migrated)
    try:
        tables = await _public_tables(conn)
    finally:
        await conn.close()
    placed = DISTRIBUTED | REFERENCE | LOCAL
    assert sorted(tables - placed) == [], "tables placed nowhere"
    assert sorted(placed - tables) == [], "placed tables that do not exist"


_KEYS = """
SELECT c.conname AS name, c.contype::text AS kind, t.relname AS table_name, r.relname AS referenced,
       ARRAY(SELECT a.attname::text FROM unnest(c.conkey) WITH ORDINALITY k(n, i)
             JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.n ORDER BY k.i) AS columns,
       ARRAY(SELECT a.attname::text FROM unnest(c.confkey) WITH ORDINALITY k(n, i)
             JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = k.n ORDER BY k.i) AS referenced_columns
FROM pg_constraint c
JOIN pg_class t ON t.oid = c.conrelid
JOIN pg_namespace n ON n.oid = t.relnamespace
LEFT JOIN pg_class r ON r.oid = c.confrelid
WHERE n.nspname = 'public' AND c.contype IN ('p', 'u', 'f')
UNION ALL
SELECT i.relname, 'unique index', t.relname, NULL,
       ARRAY(SELECT a.attname::text FROM unnest(x.indkey::int2[]) k(n)
             JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.n),
       NULL
FROM pg_index x
JOIN pg_class i ON i.oid = x.indexrelid
JOIN pg_class t ON t.oid = x.indrelid
JOIN pg_namespace n ON n.oid = t.relnamespace
WHERE n.nspname = 'public' AND x.indisunique
  AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = x.indexrelid)
"""


def key_problems(keys: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """What breaks Citus's rules for keys, by constraint or index name: a primary key, unique key or
    foreign key of a distributed table without project_id; a foreign key between distributed tables
    that does not match project_id to project_id; one that references a table its own kind cannot
    (a reference table only references reference tables; nothing references a local table but a
    local table)."""
    problems = {}
    for key in keys:
        table, referenced, columns = key["table_name"], key["referenced"], list(key["columns"])
        if table in DISTRIBUTED and "project_id" not in columns:
            problems[key["name"]] = f"{key['kind']} of {table} on {columns}: no project_id"
        if key["kind"] != "f":
            continue
        allowed = {
            **dict.fromkeys(DISTRIBUTED, DISTRIBUTED | REFERENCE),
            **dict.fromkeys(REFERENCE, REFERENCE),
            **dict.fromkeys(LOCAL, LOCAL | REFERENCE),
        }[table]
        if referenced not in allowed:
            problems[key["name"]] = f"foreign key of {table} references {referenced}, which it cannot on Citus"
        elif table in DISTRIBUTED and referenced in DISTRIBUTED:
            pairs = list(zip(columns, key["referenced_columns"]))
            if ("project_id", "project_id") not in pairs:
                problems[key["name"]] = f"foreign key of {table} to {referenced} does not match project_id: {pairs}"
    return problems


def test_a_key_without_project_id_is_flagged() -> None:
    keys: list[dict[str, Any]] = [
        {"name": "a", "kind": "u", "table_name": "facts", "referenced": None, "columns": ["subject_id"]},
        {
            "name": "b",
            "kind": "f",
            "table_name": "conflict_members",
            "referenced": "facts",
            "columns": ["project_id", "fact_id"],
            "referenced_columns": ["id", "project_id"],
        },
        {
            "name": "c",
            "kind": "f",
            "table_name": "api_keys",
            "referenced": "facts",
            "columns": ["project_id"],
            "referenced_columns": ["project_id"],
        },
        {"name": "d", "kind": "p", "table_name": "facts", "referenced": None, "columns": ["project_id", "id"]},
    ]
    assert sorted(key_problems(keys)) == ["a", "b", "c"]


async def test_every_key_of_a_distributed_table_holds_project_id(migrated: str) -> None:
    conn = await asyncpg.connect(migrated)
    try:
        keys = [dict(r) for r in await conn.fetch(_KEYS)]
    finally:
        await conn.close()
    assert {k["table_name"] for k in keys if k["kind"] == "f"} >= {"episode_chunks", "conflict_members", "api_keys"}
    problems = key_problems(keys)
    assert {name: p for name, p in problems.items() if name not in KEY_EXCEPTIONS} == {}
    assert sorted(set(KEY_EXCEPTIONS) - set(problems)) == [], "KEY_EXCEPTIONS names a key that breaks no rule"


# --- every statement of a workload that runs every operation

# Rows that make a scope large enough for its own indexes here.
SCOPE_ROWS = 6

# The functions of haki_context/db that send SQL and that the workload does not run, with why.
NOT_RUN = {
    ("migrate", "apply"): "migrations are DDL, run on the coordinator (docs/scale-out.md)",
    ("migrate", "pending"): "migrations are DDL, run on the coordinator",
    ("health", "ping"): "a connection of its own, `SELECT 1`: no table",
    ("notify", "listen"): "the live-trace listener's own connection (LISTEN): no table",
    ("notify", "ping"): "the live-trace listener's own connection, `SELECT 1`: no table",
    ("replication", "replay_position"): "a replica's replay position: no table",
    ("replication", "replay_status"): "a replica's recovery state: no table",
}

_SQL_CALLS = {"fetch", "fetchrow", "fetchval", "execute", "executemany", "cursor", "add_listener"}


def db_functions_with_sql() -> set[tuple[str, str]]:
    """(module, function) of every top-level function of haki_context/db that sends a statement."""
    found = set()
    for path in Path(haki_context.db.__file__).parent.glob("*.py"):
        for node in python_ast.parse(path.read_text()).body:
            if isinstance(node, python_ast.FunctionDef | python_ast.AsyncFunctionDef) and any(
                isinstance(c, python_ast.Call)
                and isinstance(c.func, python_ast.Attribute)
                and c.func.attr in _SQL_CALLS
                for c in python_ast.walk(node)
            ):
                found.add((path.stem, node.name))
    return found


@dataclass
class Workload:
    """What the workload left: the statements sent, in order, and the functions of haki_context/db run."""

    statements: list[str]
    called: set[tuple[str, str]]  # (module, function) of haki_context/db run


class _Calls:
    """Which functions of haki_context/db run (a profile hook on this thread while it is set)."""

    def __init__(self) -> None:
        self.folder = str(Path(haki_context.db.__file__).parent)
        self.called: set[tuple[str, str]] = set()

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_filename.startswith(self.folder):
            self.called.add((Path(frame.f_code.co_filename).stem, frame.f_code.co_name))


def _keyed(rt: Runtime, key: str, project_id: str) -> ProjectClient:
    return ProjectClient(client_for(rt).http, key, project_id)


async def _run_workload(rt: Runtime, admin: asyncpg.Connection, embedder: Embedder) -> None:
    """Every operation of the server once or more, in one project."""
    pool = rt.pool
    await check_embedding_space(pool, embedder)  # records the space
    await warm_connections(pool, rt.settings)
    project = f"project-{uuid.uuid4().hex[:8]}"
    keys = [serving_keys.generate() for _ in range(3)]
    async with pool.acquire() as conn:
        for new in keys:
            await db_keys.insert_key(
                conn,
                project,
                key_id=new.key_id,
                key_hash=new.key_hash,
                prefix=new.prefix,
                name="citus",
                scopes=("read", "write", "erase"),
            )
        await db_keys.list_keys(conn, None)
        await db_keys.list_keys(conn, project)
        assert await db_keys.revoke_key(conn, keys[2].key_id)
        await connection_limit(conn)
    client = _keyed(rt, keys[0].plain, project)
    revoked = _keyed(rt, keys[2].plain, project)
    assert (await revoked.post("{ stats { contextCalls } }")).status_code == 401
    await revoked.http.aclose()

    # memory: events, facts in every mode, conflicts
    subject = "ann"
    turns = await record(
        client,
        subject,
        [
            "Ann moved to Lisbon with Bruno last spring.",
            "Bruno plays chess with Ann on Tuesdays.",
            "Ann prefers her invoices in French.",
        ],
    )
    await client.execute(
        "mutation($i: EventInput!) { recordEvent(input: $i) { id } }",
        {
            "i": {
                "subjectId": subject,
                "kind": "conversation.transcript",
                "occurredAt": "2025-03-01T09:30:00+00:00",
                "payload": {
                    "messages": [
                        {"speaker": "Ann", "text": "Call me Annie, everyone does."},
                        {"speaker": "Agent", "text": "Sure, Annie."},
                    ]
                },
            }
        },
    )
    await assert_fact(
        client, subject, "home_city", "Paris", sourceEventIds=[turns[0]], validFrom="2024-01-01T00:00:00Z"
    )
    await assert_fact(client, subject, "home_city", "Lisbon", sourceEventIds=[turns[0]])  # supersedes Paris
    before_reinforcement = datetime.now(UTC)
    await assert_fact(client, subject, "home_city", "Lisbon", sourceEventIds=[turns[1]])  # reinforces
    acme = await assert_fact(client, subject, "employer", "Acme")
    globex = await assert_fact(client, subject, "employer", "Globex", mode="CONTEST")
    await assert_fact(client, subject, "employer", "Initech", mode="CONTEST")  # joins the open set
    chess = await assert_fact(client, subject, "hobby", "chess", mode="ADD")
    mood = await assert_fact(client, subject, "mood", "tired", volatility="EPHEMERAL")
    await assert_fact(client, subject, "manager", "Claire runs the office")
    await assert_fact(client, subject, "colleague", "Claire likes espresso with Bruno")
    opened = await client.execute(
        'mutation($f: [ID!]!) { openConflict(factIds: $f, reason: "which") { id } }',
        {"f": [chess["fact"]["id"], mood["fact"]["id"]]},
    )
    await client.execute("mutation($id: ID!) { dismissConflict(id: $id) { id } }", {"id": opened["openConflict"]["id"]})
    await client.execute(
        "mutation($id: ID!, $k: ID!) { resolveConflict(id: $id, keepFactId: $k) { id keptFact { id } facts { id } } }",
        {"id": globex["conflict"]["id"], "k": globex["fact"]["id"]},
    )
    await client.execute(
        'mutation($id: ID!) { retractFact(id: $id, reason: "wrong") { id status } }', {"id": mood["fact"]["id"]}
    )
    assert acme["outcome"] == "CREATED"

    # context: now and at a past instant, both full-text ranks, a multi-hop expansion
    packet = await context(client, subject, "Where does Ann live and who is Bruno?")
    as_of_query = (
        "query($s: String!, $q: String!, $at: DateTime) {"
        f" context(subjectId: $s, query: $q, asOf: $at) {{ {FULL_SELECTION} }} }}"
    )
    await client.execute(
        as_of_query, {"s": subject, "q": "Where does Ann live?", "at": before_reinforcement.isoformat()}
    )
    now = datetime.now(UTC).isoformat()
    for variant in (with_settings(rt, retrieval_top_k=1), with_settings(rt, full_text_rank="cover_density")):
        other = _keyed(variant, keys[0].plain, project)
        await context(other, subject, "who runs the office")
        await other.execute(as_of_query, {"s": subject, "q": "who runs the office", "at": now})
        await other.http.aclose()

    # traces, replay, stats
    trace_id = packet["traceId"]
    await client.execute(
        "query($id: ID!) { trace(id: $id) { id rendered settings { id rankingProfile } decisions { itemId } } }",
        {"id": trace_id},
    )
    since = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    page = await client.execute(
        "query($s: String, $since: DateTime) { traces(subjectId: $s, since: $since, first: 1)"
        " { edges { node { id } } pageInfo { endCursor } } }",
        {"s": subject, "since": since},
    )
    await client.execute(
        "query($after: String) { traces(first: 5, after: $after) { edges { node { id counts { included } } } } }",
        {"after": page["traces"]["pageInfo"]["endCursor"]},
    )
    await client.execute(
        "query($id: ID!) { replay(traceId: $id, with: {budget: 200}, persist: true, compareWithNow: true)"
        " { persisted packet { traceId } diff { identical changes { itemId why } } } }",
        {"id": trace_id},
    )
    await client.execute(
        "query($since: DateTime) { stats(since: $since) { contextCalls latencyP50Ms } }", {"since": since}
    )
    await client.execute("{ stats { contextCalls activeFacts openConflicts } }")
    await client.execute(
        "query($since: DateTime!) { statsSeries(since: $since, bucket: HOUR) { start contextCalls } }", {"since": since}
    )

    # reads of memory, with their pages
    fact_fields = "id status version sourceEventIds sourceEvents { id kind } supersededBy { id }"
    facts = await client.execute(
        f"query($s: String!) {{ facts(subjectId: $s, first: 2) {{ edges {{ node {{ {fact_fields} }} }} pageInfo {{ endCursor }} }} }}",
        {"s": subject},
    )
    await client.execute(
        "query($s: String!, $after: String) { facts(subjectId: $s, status: ACTIVE, after: $after) { edges { node { id } } } }",
        {"s": subject, "after": facts["facts"]["pageInfo"]["endCursor"]},
    )
    await client.execute(f"query($id: ID!) {{ fact(id: $id) {{ {fact_fields} }} }}", {"id": acme["fact"]["id"]})
    events = await client.execute(
        "query($s: String!) { events(subjectId: $s, first: 2) { edges { node { id } } pageInfo { endCursor } } }",
        {"s": subject},
    )
    await client.execute(
        "query($s: String!, $after: String) { events(subjectId: $s, after: $after) { edges { node { id } } } }",
        {"s": subject, "after": events["events"]["pageInfo"]["endCursor"]},
    )
    await client.execute("query($id: ID!) { event(id: $id) { id payload } }", {"id": turns[0]})
    conflicts = await client.execute(
        "query($s: String) { conflicts(subjectId: $s, first: 1) { edges { node { id facts { id } keptFact { id } } }"
        " pageInfo { endCursor } } }",
        {"s": subject},
    )
    await client.execute(
        "query($after: String) { conflicts(status: RESOLVED, after: $after) { edges { node { id } } } }",
        {"after": conflicts["conflicts"]["pageInfo"]["endCursor"]},
    )

    # export, then import twice (the second file as one made before history was kept)
    exported = await client.http.get(
        "/export", params={"subjectId": subject}, headers={"authorization": f"Bearer {keys[0].plain}"}
    )
    assert exported.status_code == 200, exported.text
    lines = exported.content.splitlines()
    await import_lines(rt, Caller.operator(project), lines, "ann-copy")
    undated = []
    for line in lines:
        record_ = orjson.loads(line)
        if record_.get("type") == "fact" and record_.get("status") == "SUPERSEDED":
            record_.pop("endedAt", None)
        undated.append(orjson.dumps(record_))
    await import_lines(rt, Caller.operator(project), undated, "ann-undated")

    # a large scope: its own indexes and common lexemes, its own statement texts, then a rebuild
    large = "large"
    for i in range(SCOPE_ROWS):
        await assert_fact(client, large, f"fact_{i}", f"value {i} about topic {i % 2}", mode="ADD")
    await record(client, large, [f"turn {i} about topic {i % 2}" for i in range(SCOPE_ROWS)])
    built = await build_pending(pool, SCOPE_ROWS, ivf_rows=10**6, lexeme_rows=2)
    assert {s.table for s in built or []} == {"facts", "episode_chunks"}
    for variant in (rt, with_settings(rt, full_text_rank="cover_density")):
        other = _keyed(variant, keys[1].plain, project)
        for _ in range(2):  # the first call learns that the scope has its own indexes, the second uses them
            await context(other, large, "value about topic 1")
        await other.http.aclose()
    await admin.execute(  # an index no entry owns, as a forget that raced a build leaves
        "CREATE INDEX facts_hnsw_00000000000000000000 ON facts (project_id) WHERE project_id = 'nobody'"
    )
    rebuilt = await build_pending(pool, SCOPE_ROWS, ivf_rows=0, lexeme_rows=2)  # now past the IVFFlat threshold
    assert rebuilt
    await context(client, large, "value about topic 1")
    async with pool.acquire() as conn:
        assert await scope_indexes.ready(conn, project)

    # background passes: job claims, the embedding space checked and switched, retention
    assert await jobs.claim(pool, jobs.Job.TRACE_RETENTION, 3600.0)
    assert not await jobs.claim(pool, jobs.Job.TRACE_RETENTION, 3600.0)
    async with pool.acquire() as conn:
        await db_jobs.last_runs(conn)
    await admin.execute("UPDATE server_meta SET value = 'another space' WHERE key = 'embedding_space'")
    with pytest.raises(EmbedderMismatch):
        await check_embedding_space(pool, embedder)
    await reembed(pool, embedder, batch_size=8)
    assert await prune(pool, 0.0, batch_size=3) > 3

    # forgetting: a subject with its own indexes, and an imported one
    for forgotten in (large, "ann-copy"):
        await client.execute("mutation($s: String!) { forgetSubject(subjectId: $s) { erasureId } }", {"s": forgotten})
    await client.http.aclose()


@pytest.fixture(scope="module")
async def workload(pg_uri: str, hashing_embedder: Embedder) -> AsyncIterator[Workload]:
    """The statements the server sent, and the functions of haki_context/db it ran, while the
    workload ran on a database of its own (background passes read every project's rows)."""
    name = f"haki_citus_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(pg_uri)
    await admin.execute(f'CREATE DATABASE "{name}"')
    dsn = with_database(pg_uri, name)
    log = StatementLog()

    async def init(conn: asyncpg.Connection) -> None:
        await init_connection(conn)
        conn.add_query_logger(log)

    try:
        await migrate.apply(dsn)
        pool = await asyncpg.create_pool(dsn, min_size=1, max_size=4, init=init, reset=keep_session)
        db_admin = await asyncpg.connect(dsn)
        calls = _Calls()
        previous = sys.getprofile()
        sys.setprofile(calls)
        try:
            rt = Runtime(pool=pool, embedder=hashing_embedder, settings=make_settings(dsn, dev_mode=False))
            await _run_workload(rt, db_admin, hashing_embedder)
        finally:
            sys.setprofile(previous)
            await db_admin.close()
            await pool.close()
        yield Workload(log.statements, calls.called)
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


def module_statements() -> dict[str, str]:
    """The SQL texts db/ keeps at module level (by "module.NAME"), and every text of the candidate
    statements, both ranks and both plans (a scope's own text with its markers as constants)."""
    found: dict[str, str] = {}

    def add(source: str, value: Any) -> None:
        if isinstance(value, str):
            found.setdefault(re.sub(r"\x00(\w+)\x00", r"'\1'", value), source)
        elif isinstance(value, tuple | list):
            for item in value:
                add(source, item)

    modules: list[ModuleType] = [
        importlib.import_module(f"haki_context.db.{info.name}")
        for info in pkgutil.iter_modules(haki_context.db.__path__)
    ]
    for module in modules:
        for name, value in vars(module).items():
            if name.isupper() or (name.startswith("_") and name[1:].isupper()):
                add(f"{module.__name__}.{name}", value)
    for module_name, texts in (("retrieval", retrieval.statement_texts()), ("as_of", as_of.statement_texts())):
        for key, statement in texts.items():
            add(f"haki_context.db.{module_name}: {key}", statement.text)
    statements = {}
    for sql, source in found.items():
        try:
            pglast.parse_sql(sql)
        except pglast.parser.ParseError:
            continue  # a fragment (a column list, a lock key), not a statement
        statements[sql] = source
    return statements


def test_the_workload_runs_every_function_of_db_that_sends_sql(workload: Workload) -> None:
    missing = db_functions_with_sql() - workload.called - set(NOT_RUN)
    assert sorted(missing) == [], "functions of haki_context/db the workload never ran"
    assert sorted(set(NOT_RUN) - db_functions_with_sql()) == [], "NOT_RUN names a function that sends no SQL"
    # A scope's own statement texts (constants), and its index DDL.
    assert any("hnsw_scan AS MATERIALIZED" in s and "f.project_id = '" in s for s in workload.statements)
    assert any("hnsw_scan AS MATERIALIZED" in s and "c.project_id = '" in s for s in workload.statements)
    assert any(s.startswith("CREATE INDEX CONCURRENTLY") for s in workload.statements)


def test_every_statement_stays_in_one_project_or_is_named_as_spanning(
    workload: Workload, catalog: dict[str, tuple[str, ...]]
) -> None:
    statements = module_statements()
    statements.update(dict.fromkeys(workload.statements, "sent by the server"))
    reports, used = unexplained(statements, catalog)
    assert not reports, "statements that leave their project:\n\n" + "\n\n".join(map(str, reports))
    assert sorted(s.name for s in SPANNING if s.name not in used) == [], "SPANNING names a statement never seen"


def test_a_statement_that_leaves_its_project_fails_the_check_of_the_workload(
    workload: Workload, catalog: dict[str, tuple[str, ...]]
) -> None:
    bad = "SELECT f.id FROM facts f JOIN conflict_members m ON m.fact_id = f.id WHERE f.project_id = $1"
    statements = dict.fromkeys([*workload.statements, bad], "sent by the server")
    reports, _ = unexplained(statements, catalog)
    assert [r.sql for r in reports] == [bad]
