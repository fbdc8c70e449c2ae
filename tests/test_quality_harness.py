"""Smoke test of the retrieval-quality harness (benchmarks/quality.py).

A few questions of one LoCoMo conversation with the hashing embedder, no
score threshold: the harness runs end to end through GraphQL and its report
holds every figure (per category and overall; server, BM25 and dense; both
ingestion modes and both budgets). The LoCoMo conversations are not shipped with
the project: the tests that need them read their folder from $LOCOMO_DIR and skip
without it (a folder named there that holds none fails).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))  # benchmarks/ is a folder of the repository, not an installed package

from benchmarks import quality  # noqa: E402
from benchmarks.locomo import (  # noqa: E402
    CATEGORIES,
    NEEDS_DATA,
    data_dir,
    events,
    load_conversation,
    split_evidence,
)

RETRIEVERS = ("server", "bm25", "dense", "rrf")


def _require_data() -> Path:
    """The LoCoMo dev conversations' folder; the test skips when none is named."""
    found = data_dir()
    if found is None:
        pytest.skip(f"this test {NEEDS_DATA}")
    if not (found / "26.json").is_file():
        pytest.fail(f"LOCOMO_DIR names {found}, which holds no LoCoMo dev conversation 26.json")
    return found


def _share(x: object) -> bool:
    return isinstance(x, float | int) and 0.0 <= float(x) <= 1.0


def _number(x: object) -> bool:
    return isinstance(x, float | int) and math.isfinite(float(x)) and float(x) >= 0.0


def test_evidence_ids_are_split_and_unknown_ones_counted() -> None:
    assert split_evidence(["D8:6; D9:17"]) == ["D8:6", "D9:17"]
    assert split_evidence(["D9:1 D4:4", "D1:2,D1:3"]) == ["D9:1", "D4:4", "D1:2", "D1:3"]
    conv = load_conversation(_require_data() / "42.json")
    assert "D" in conv.invalid_evidence and "D10:19" in conv.invalid_evidence
    assert all(set(q.evidence) <= conv.turn_ids and q.evidence for q in conv.questions)
    assert {q.category for q in conv.questions} == set(CATEGORIES)


def test_session_events_map_every_chunk_to_its_turn() -> None:
    conv = load_conversation(_require_data() / "26.json")
    per_turn, per_session = events(conv, "a"), events(conv, "b")
    assert [t for e in per_turn for t in e.chunk_turns] == [t.dia_id for t in conv.turns]
    assert [t for e in per_session for t in e.chunk_turns] == [t.dia_id for t in conv.turns]
    assert len(per_session) == len(conv.sessions)
    # mode a: the session date plus one second per turn; mode b: the session date
    for event, turn in zip(per_turn, conv.turns):
        assert (event.occurred_at - conv.sessions[turn.session]).total_seconds() == turn.index
    assert [e.occurred_at for e in per_session] == list(conv.sessions.values())


def test_observations_are_loaded_with_their_evidence_turns_and_session_dates() -> None:
    conv = load_conversation(_require_data() / "26.json")
    assert len(conv.observations) == 184
    assert len({o.predicate for o in conv.observations}) == len(conv.observations)  # none supersedes another
    for o in conv.observations:
        assert o.text and o.evidence and set(o.evidence) <= conv.turn_ids
        assert o.valid_from == conv.sessions[o.session]
        assert all(int(d.split(":")[0][1:]) == o.session for d in o.evidence)  # evidence from its own session
    assert events(conv, "f") == events(conv, "a")  # mode f records the same turns


async def test_harness_runs_end_to_end_and_reports_every_figure(migrated: str, tmp_path: Path) -> None:
    data = _require_data()
    config = quality.parse_args(
        [
            "--data",
            str(data),
            "--conversations",
            "26",
            "--limit-questions",
            "2",
            "--modes",
            "a,b,f",
            "--budgets",
            "900,2000",
            "--embedder",
            "hashing",
            "--label",
            "smoke",
            "--out",
            str(tmp_path),
            "--database-url",
            migrated,
            "--details",
            "--quiet",
        ]
    )
    [report] = await quality.run(config)

    # files: JSON and markdown, named by harness and date, the label as a suffix
    json_path = tmp_path / f"quality-{report['date']}-smoke.json"
    md_path = tmp_path / f"quality-{report['date']}-smoke.md"
    assert json.loads(json_path.read_text())["results"] == report["results"]
    table = md_path.read_text()
    assert "| mode | budget |" in table and "| RRF | BM25 | dense | via episodes | via facts |" in table

    assert report["data"]["conversations"] == ["26"]
    assert report["data"]["questions"] == 2 * len(CATEGORIES)
    assert report["data"]["chunks"] == {"a/26": 419, "b/26": 419, "f/26": 419}
    assert report["data"]["facts"] == {"f/26": 184}  # every observation of the conversation
    assert report["embedder"] == "hashing-384-v1"
    assert "stop words" in report["references"]["bm25"]

    assert set(report["results"]) == {"a", "b", "f"}
    for mode in ("a", "b", "f"):
        assert set(report["results"][mode]) == {"900", "2000"}
        for budget, res in report["results"][mode].items():
            groups = {"overall": res["overall"], **{f"category {c}": g for c, g in res["categories"].items()}}
            assert set(res["categories"]) == {str(c) for c in CATEGORIES}
            for name, g in groups.items():
                where = f"mode {mode}, budget {budget}, {name}"
                assert g["n"] > 0 and g["evidence_turns"] >= g["n"], where
                for r in RETRIEVERS:
                    for figure in ("recall", "recall_per_question", "hit"):
                        assert _share(g[r][figure]), (where, r, figure, g[r])
                for path in ("via_episodes", "via_facts"):
                    for figure in ("recall", "hit"):
                        assert _share(g[path][figure]), (where, path, figure)
                        # a turn covered either way is covered
                        assert g[path][figure] <= g["server"][figure], (where, path, figure)
                sessions = g["sessions"]
                for k in quality.SESSION_KS:
                    assert _share(sessions[f"all@{k}"]) and _share(sessions[f"any@{k}"]), (where, sessions)
                    # every evidence session among the first k implies one of them is
                    assert sessions[f"all@{k}"] <= sessions[f"any@{k}"], (where, sessions)
                assert sessions["any@5"] <= sessions["any@10"] and sessions["all@5"] <= sessions["all@10"]
                for figure in ("facts_mean", "episodes_mean", "tokens_mean", "k_mean"):
                    assert _number(g[figure]), (where, figure)
                assert g["tokens_mean"] <= int(budget)
                for figure in ("client_p50", "client_p95", "trace_p50", "trace_p95"):
                    assert _number(g["latency_ms"][figure]), (where, figure)
                assert g["latency_ms"]["client_p50"] <= g["latency_ms"]["client_p95"]
            assert res["overall"]["n"] == sum(g["n"] for g in res["categories"].values())
            assert res["overall"]["episodes_mean"] > 0, "the server served no episode"
            if mode == "f":
                assert res["overall"]["facts_mean"] > 0, "the server served no fact"
            else:
                assert res["overall"]["facts_mean"] == 0 and res["overall"]["via_facts"]["recall"] == 0

    # the references answer at the server's k, question by question
    rows = report["questions"]
    assert len(rows) == 3 * 2 * 2 * len(CATEGORIES)
    for row in rows:
        assert len(row["bm25"]) == len(row["dense"]) == len(row["rrf"]) == len(row["server"]) == len(set(row["server"]))
        assert set(row["via"]["episodes"]) | set(row["via"]["facts"]) == set(row["server"])
