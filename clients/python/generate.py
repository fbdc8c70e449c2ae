#!/usr/bin/env python3
"""Regenerate src/haki_context_client/_generated from ../../schema.graphql and queries.graphql.

Usage, from anywhere: `python3 clients/python/generate.py` (Python 3.11+).

ariadne-codegen pins versions of graphql-core and ruff that the server's environment does not
have, so it never goes there: this script installs it into its own throwaway virtual environment
(clients/python/.codegen-venv, ignored by git; `--venv PATH` to put it elsewhere) and runs it
twice, once for the async operations and once for the sync ones, with the base classes of
codegen/ (which hand every operation to the client's transport) and its plugin (enums that
accept a value a newer server adds). The two runs must agree on every
model; the package keeps one copy of them and both sets of operations. Last, it records the
SHA-256 of every input in _generated/sources.sha256, which the tests compare with the inputs of
the day, so a schema change without a regeneration fails with a message naming this script.
"""

from __future__ import annotations

import argparse
import filecmp
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

GENERATOR = "ariadne-codegen==0.19.0"
CLIENT_ROOT = Path(__file__).resolve().parent
REPO_ROOT = CLIENT_ROOT.parent.parent
TARGET = CLIENT_ROOT / "src" / "haki_context_client" / "_generated"
# Inputs as paths relative to the repository root: the generated code depends on these alone.
INPUTS = [
    "schema.graphql",
    "clients/python/queries.graphql",
    "clients/python/codegen/async_base_client.py",
    "clients/python/codegen/base_client.py",
    "clients/python/codegen/tolerant_enums.py",
]
HASHES = "sources.sha256"

# One configuration per run; paths are relative to clients/python (the generator's working
# directory), so the files' "Source:" comments do not depend on where the clone lives.
CONFIG = """\
[tool.ariadne-codegen]
schema_path = "../../schema.graphql"
queries_path = "queries.graphql"
target_package_name = "_generated"
target_package_path = "{target}"
client_name = "{client_name}"
client_file_name = "{client_file}"
base_client_name = "{base_name}"
base_client_file_path = "codegen/{base_file}.py"
async_client = {is_async}
multipart_uploads = false
include_all_inputs = true
include_all_enums = true
plugins = ["tolerant_enums.TolerantEnums"]

[tool.ariadne-codegen.scalars.DateTime]
type = "datetime.datetime"

[tool.ariadne-codegen.scalars.JSON]
type = "typing.Any"
"""
RUNS = {
    "async": {
        "client_name": "AsyncOperations",
        "client_file": "async_operations",
        "base_name": "AsyncBaseClient",
        "base_file": "async_base_client",
        "is_async": "true",
    },
    "sync": {
        "client_name": "SyncOperations",
        "client_file": "sync_operations",
        "base_name": "BaseClient",
        "base_file": "base_client",
        "is_async": "false",
    },
}
# What the sync run adds to the async run's package.
SYNC_ONLY = ["sync_operations.py", "base_client.py"]
ASYNC_ONLY = ["async_operations.py", "async_base_client.py"]
INIT_TAIL = """
# Added by clients/python/generate.py: the sync operations, from the generator's second run.
from .base_client import BaseClient  # noqa: E402
from .sync_operations import SyncOperations  # noqa: E402

__all__ += ["BaseClient", "SyncOperations"]
"""


def source_hashes() -> str:
    """`sha256sum` lines for every input, relative to the repository root."""
    return "".join(f"{hashlib.sha256((REPO_ROOT / p).read_bytes()).hexdigest()}  {p}\n" for p in INPUTS)


def ensure_generator(venv: Path) -> Path:
    """The ariadne-codegen executable of `venv`, installing it there when missing."""
    exe = venv / "bin" / "ariadne-codegen"
    python = venv / "bin" / "python"
    if exe.exists():
        version = subprocess.run(
            [str(python), "-m", "pip", "show", "ariadne-codegen"], capture_output=True, text=True, check=False
        ).stdout
        if "Version: " + GENERATOR.split("==")[1] in version:
            return exe
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", GENERATOR], check=True)
    return exe


def generate(exe: Path, work: Path, run: str) -> Path:
    """One run of the generator into work/<run>; the generated package's folder."""
    out = work / run
    out.mkdir()
    config = work / f"{run}.toml"
    config.write_text(CONFIG.format(target=out.as_posix(), **RUNS[run]), encoding="utf-8")
    # The plugins live in codegen/, importable by their module names.
    env = {**os.environ, "PYTHONPATH": str(CLIENT_ROOT / "codegen")}
    subprocess.run([str(exe), "--config", str(config), "client"], cwd=CLIENT_ROOT, check=True, env=env)
    return out / "_generated"


def merge(async_pkg: Path, sync_pkg: Path) -> None:
    """The async package plus the sync operations, once the two runs agree on everything else."""
    shared = sorted(p.name for p in async_pkg.glob("*.py") if p.name not in {*ASYNC_ONLY, "__init__.py"})
    sync_shared = sorted(p.name for p in sync_pkg.glob("*.py") if p.name not in {*SYNC_ONLY, "__init__.py"})
    if shared != sync_shared:
        raise SystemExit(f"the two runs generated different modules: {shared} vs {sync_shared}")
    differ = [name for name in shared if not filecmp.cmp(async_pkg / name, sync_pkg / name, shallow=False)]
    if differ:
        raise SystemExit(f"the two runs generated different models in {differ}")
    for name in SYNC_ONLY:
        shutil.copy2(sync_pkg / name, async_pkg / name)
    init = async_pkg / "__init__.py"
    init.write_text(init.read_text(encoding="utf-8") + INIT_TAIL, encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", type=Path, default=CLIENT_ROOT / ".codegen-venv", help="the generator's venv")
    args = parser.parse_args()
    exe = ensure_generator(args.venv.resolve())
    with tempfile.TemporaryDirectory(prefix="haki-codegen-") as tmp:
        work = Path(tmp)
        async_pkg = generate(exe, work, "async")
        sync_pkg = generate(exe, work, "sync")
        merge(async_pkg, sync_pkg)
        (async_pkg / HASHES).write_text(source_hashes(), encoding="utf-8")
        if TARGET.exists():
            shutil.rmtree(TARGET)
        shutil.copytree(async_pkg, TARGET, ignore=shutil.ignore_patterns("__pycache__"))
    print(f"generated {TARGET.relative_to(REPO_ROOT)} from {', '.join(INPUTS[:2])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
