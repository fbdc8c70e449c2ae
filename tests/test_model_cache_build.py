"""The fp32 model of `onnx-fp32` is built once per model cache, however many processes start
together (the workers of one server, or servers sharing the cache)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from haki_context.core.embedding import model_build


def test_workers_starting_together_build_the_fp32_model_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    builds: list[Path] = []

    def slow_build(model_dir: Path, cache_dir: Path, target: Path) -> None:
        builds.append(target)
        time.sleep(0.3)  # long enough for every other starter to reach the lock meanwhile
        target.write_bytes(b"model")

    # The build itself (torch, the packaged weights) is not what is tested: its lock is.
    monkeypatch.setattr(model_build, "require_torch_extra", lambda: None)
    monkeypatch.setattr(model_build, "packaged_model_dir", lambda: tmp_path / "weights")
    monkeypatch.setattr(model_build, "weights_digest", lambda model_dir: "0123456789abcdef")
    monkeypatch.setattr(model_build, "_build_fp32", slow_build)
    cache = tmp_path / "cache"
    found: list[Path] = []
    # flock locks belong to each open of the lock file, so threads contend as processes do.
    starters = [threading.Thread(target=lambda: found.append(model_build.ensure_fp32(cache))) for _ in range(4)]
    for starter in starters:
        starter.start()
    for starter in starters:
        starter.join()
    assert len(builds) == 1
    assert found == [builds[0]] * 4 and builds[0].read_bytes() == b"model"
