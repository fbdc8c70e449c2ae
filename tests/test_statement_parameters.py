"""The retrieval statements' parameters are bound by name (db/parameters.py): every text of
db/retrieval.py and db/as_of.py references exactly the parameters it declares, and every call
sends exactly those, each the value of its name. No database: the statements are only rendered
and their arguments recorded."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from haki_context.db import as_of, retrieval
from haki_context.db.parameters import Parameters, Statement

REFERENCE = re.compile(r"\$(\d+)")
RANKS = sorted(retrieval.FULL_TEXT_RANKS)
COUNTS = {"top_k", "blocked_limit", "vector_k", "text_k", "entities", "exclude_ids", "per_entity", "read_rows"}


def references(text: str) -> set[int]:
    return {int(n) for n in REFERENCE.findall(text)}


def params(rank: str, **changes: Any) -> retrieval.SearchParams:
    p = retrieval.SearchParams(
        project_id="project-1",
        subject_id="subject-1",
        vector=np.full(384, 0.05, dtype=np.float32),
        query="Where does Alice live?",
        now=datetime(2025, 5, 5, tzinfo=UTC),
        max_lexemes=32,
        lexeme_rows=1000,
        use_scope_index=True,
        hnsw_fetch=256,
        horizon_volatile_s=1.5,
        horizon_ephemeral_s=2.5,
        full_text_rank=rank,
    )
    return replace(p, **changes)


class Recorder:
    """A connection that records what it is sent and returns no rows."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    async def fetch(self, text: str, *args: Any) -> list[Any]:
        self.calls.append((text, args))
        return []

    async def fetchval(self, text: str, *args: Any) -> Any:
        self.calls.append((text, args))
        return None


def test_every_statement_references_exactly_its_declared_parameters() -> None:
    expected = {
        retrieval: {f"{t}/{r}/{plan}" for t in ("facts", "episode_chunks") for r in RANKS for plan in ("exact", "hnsw")}
        | {"multi_hop"},
        as_of: {f"{t}/{r}/exact" for t in ("facts", "episode_chunks") for r in RANKS} | {"multi_hop", "project_start"},
    }
    for module, labels in expected.items():
        texts = module.statement_texts()
        assert set(texts) == labels, module.__name__
        for label, statement in texts.items():
            names = statement.parameters.names
            assert references(statement.text) == set(range(1, len(names) + 1)), f"{module.__name__} {label}"
            for name in names:  # each name's reference, not the start of a longer one
                assert re.search(re.escape(statement.parameters[name]) + r"(?!\d)", statement.text), name


def test_only_the_idf_rank_takes_rows_per_lexeme() -> None:
    for module in (retrieval, as_of):
        for label, statement in module.statement_texts().items():
            takes = "lexeme_rows" in statement.parameters.names
            assert takes == (label.split("/")[1:2] == ["idf"]), f"{module.__name__} {label}"


def test_the_same_setting_has_the_same_name_live_and_at_an_instant() -> None:
    # Numbered, live facts' $11 was the HNSW over-fetch and the instant's the rows per lexeme.
    live = retrieval.statement_texts()["facts/idf/exact"].parameters
    past = as_of.statement_texts()["facts/idf/exact"].parameters
    assert "hnsw_fetch" in live.names and "hnsw_fetch" not in past.names
    assert set(past.names) == set(live.names) - {"hnsw_fetch"}


def test_no_numbered_parameter_is_written_in_the_modules() -> None:
    for module in (retrieval, as_of):
        source = Path(module.__file__ or "").read_text(encoding="utf-8")
        assert not re.search(r"\$\d", source), module.__name__


@pytest.mark.parametrize("rank", RANKS)
@pytest.mark.parametrize("own", [frozenset(), frozenset({"facts", "episode_chunks"})])
async def test_every_call_sends_each_parameter_its_named_value(rank: str, own: frozenset[str]) -> None:
    p = params(rank, own_index_tables=own)
    counts: dict[str, Any] = {
        "top_k": 7,
        "blocked_limit": 3,
        "vector_k": 9,
        "text_k": 4,
        "entities": ["Alice", "Bob"],
        "exclude_ids": ["00000000-0000-0000-0000-000000000001"],
        "per_entity": 5,
        "read_rows": 100,
    }
    warm_counts = dict.fromkeys(COUNTS, 1) | {"entities": ["warm"], "exclude_ids": []}
    declared = {s.text: s.parameters for m in (retrieval, as_of) for s in m.statement_texts().values()}
    for table in own:  # a scope's own texts, rendered for the scope
        declared[retrieval.candidates_text(table, p)] = retrieval.statement_texts()[f"{table}/{rank}/hnsw"].parameters
    for statements in (retrieval.LIVE, as_of.AT_INSTANT):
        conn = Recorder()
        await statements.fact_candidates(conn, p, counts["top_k"], counts["blocked_limit"])
        await statements.episode_candidates(conn, p, counts["vector_k"], counts["text_k"])
        await statements.multi_hop(
            conn,
            p,
            counts["entities"],
            exclude_ids=counts["exclude_ids"],
            per_entity=counts["per_entity"],
            read_rows=counts["read_rows"],
        )
        expected = [counts] * 3
        if statements is retrieval.LIVE:
            await retrieval.warm(conn, p)
            expected += [warm_counts] * 3
        assert len(conn.calls) == len(expected)
        for (text, args), call_counts in zip(conn.calls, expected, strict=True):
            text = text.removeprefix("EXPLAIN ")
            assert "\x00" not in text
            parameters = declared[text]
            assert references(text) == set(range(1, len(args) + 1))
            assert len(args) == len(parameters.names)
            for name, value in zip(parameters.names, args, strict=True):
                if name in COUNTS:
                    assert value == call_counts[name], (statements.name, name)
                else:
                    assert value is getattr(p, name), (statements.name, name)


async def test_project_start_sends_the_project() -> None:
    conn = Recorder()
    await as_of.project_start(conn, "project-1")
    [(text, args)] = conn.calls
    assert args == ("project-1",) and references(text) == {1}


def test_the_statement_sets_are_the_modules_functions() -> None:
    assert retrieval.LIVE.name == "live" and as_of.AT_INSTANT.name == "as_of"
    for statements, module in ((retrieval.LIVE, retrieval), (as_of.AT_INSTANT, as_of)):
        assert statements.fact_candidates is module.fact_candidates
        assert statements.episode_candidates is module.episode_candidates
        assert statements.multi_hop is module.multi_hop


def test_parameters_render_names_and_build_arguments_by_name() -> None:
    P = Parameters("project_id", "now", "top_k")
    assert (P.project_id, P["now"], P.top_k) == ("$1", "$2", "$3")
    assert P.legend() == "$1 project_id, $2 now, $3 top_k"
    assert P.args({"top_k": 5, "project_id": "p", "now": 0}) == ("p", 0, 5)
    with pytest.raises(AttributeError, match="no parameter 'query'"):
        _ = P.query
    with pytest.raises(KeyError):
        _ = P["query"]
    with pytest.raises(ValueError, match="no value for the parameter 'now'"):
        P.args({"project_id": "p", "top_k": 5})
    with pytest.raises(ValueError, match=r"values for no parameter of the statement: \['query'\]"):
        P.args({"project_id": "p", "now": 0, "top_k": 5, "query": "q"})


def test_a_parameter_name_must_be_one_and_plain() -> None:
    for bad in (("a", "a"), ("args",), ("names",), ("_hidden",), ("not a name",)):
        with pytest.raises(ValueError):
            Parameters(*bad)


def test_a_statement_refuses_a_text_that_disagrees_with_its_parameters() -> None:
    P = Parameters("project_id", "now")
    assert Statement(P, f"SELECT {P.project_id}, {P.now}").text == "SELECT $1, $2"
    with pytest.raises(ValueError, match=r"never referenced \['now'\]"):
        Statement(P, f"SELECT {P.project_id}")
    with pytest.raises(ValueError, match=r"not declared \['\$3'\]"):
        Statement(P, f"SELECT {P.project_id}, {P.now}, $3")


def test_statement_args_takes_the_shared_values_declared_and_refuses_others() -> None:
    p = params("idf")
    P = Parameters("project_id", "now", "top_k")
    assert retrieval.statement_args(P, p, top_k=3) == ("project-1", p.now, 3)
    with pytest.raises(ValueError, match="no value for the parameter 'top_k'"):
        retrieval.statement_args(P, p)
    with pytest.raises(ValueError, match="blocked_limit"):
        retrieval.statement_args(P, p, top_k=3, blocked_limit=1)
    with pytest.raises(ValueError, match="SearchParams"):
        retrieval.statement_args(P, p, top_k=3, now=p.now)
