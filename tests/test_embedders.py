"""Embedders: the real model offline, its ONNX build in the same space, and no mixing of spaces."""

from __future__ import annotations

import asyncpg
import numpy as np
import pytest

from haki_context.core.embedder import Embedder, HashingEncoder, MiniLMEncoder, OnnxMiniLMEncoder, build_encoder
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


def test_onnx_build_agrees_with_the_torch_model(minilm_embedder: Embedder) -> None:
    torch_vectors = minilm_embedder.encoder.encode(SENTENCES)
    onnx_vectors = OnnxMiniLMEncoder().encode(SENTENCES)
    cosines = (torch_vectors * onnx_vectors).sum(axis=1)
    assert cosines.mean() >= 0.999 and cosines.min() >= 0.998
    assert np.allclose(np.linalg.norm(onnx_vectors, axis=1), 1.0, atol=1e-5)


def test_real_model_ranks_by_meaning(minilm_embedder: Embedder) -> None:
    vectors = minilm_embedder.encoder.encode(SENTENCES)
    question = vectors[-1]
    assert int(np.argmax(vectors[:-1] @ question)) == 0  # bills <-> invoices, no shared word


def test_hashing_embedder_is_deterministic_and_unit_length() -> None:
    a, b = HashingEncoder().encode(["same text", "same text"])
    assert np.array_equal(a, b) and abs(float(np.linalg.norm(a)) - 1.0) < 1e-6


def test_unknown_provider_is_refused() -> None:
    with pytest.raises(RuntimeError, match="HAKI_EMBED_PROVIDER"):
        build_encoder("word2vec")


async def test_a_database_refuses_another_embedding_space_until_reembedded(pg_uri: str) -> None:
    admin = await asyncpg.connect(pg_uri)
    await admin.execute("DROP DATABASE IF EXISTS haki_space")
    await admin.execute("CREATE DATABASE haki_space")
    await admin.close()
    dsn = pg_uri.replace("/postgres?", "/haki_space?")
    await migrate.apply(dsn)
    pool = await create_pool(dsn, max_size=2)
    hashing, onnx = Embedder(HashingEncoder()), Embedder(OnnxMiniLMEncoder())
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


def test_minilm_and_onnx_share_one_space() -> None:
    assert MiniLMEncoder.space == OnnxMiniLMEncoder.space != HashingEncoder.space
