"""The TypeScript client (clients/typescript): its typed documents match schema.graphql, its
build and tests pass (`npm test`: the unit tests, and the live ones against a `haki-context serve`
of this environment that they start themselves, named by HAKI_CONTEXT_BIN), and the agent loop
docs/agents.md shows is the example those tests run.

It needs Node.js and the client's packages (`npm ci --prefix clients/typescript`, which .ci/run
does); without them it is skipped here and fails in CI.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CLIENT = ROOT / "clients" / "typescript"
CLI = str(Path(sys.executable).parent / "haki-context")


def _require_the_client() -> None:
    """Skip (fail in CI) where the client cannot be built."""
    missing = None
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            missing = missing or f"`{tool}` is not installed (the TypeScript client builds and runs on Node.js)"
    if missing is None and not (CLIENT / "node_modules" / "typescript").is_dir():
        missing = "the TypeScript client's packages are not installed: run `npm ci --prefix clients/typescript`"
    if missing is not None:
        if os.environ.get("CI"):
            pytest.fail(f"the TypeScript client's tests must run in CI: {missing}")
        pytest.skip(missing)


def _npm_run(script: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    _require_the_client()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HAKI_")}
    env["HAKI_CONTEXT_BIN"] = CLI
    return subprocess.run(
        ["npm", "run", "--silent", script],
        cwd=CLIENT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def test_the_agent_loop_of_the_docs_is_the_example_the_tests_run() -> None:
    section = (ROOT / "docs" / "agents.md").read_text(encoding="utf-8").split("\n## TypeScript\n", 1)[1]
    blocks = re.findall(r"^```ts\n(.*?)^```$", section.split("\n## ", 1)[0], re.MULTILINE | re.DOTALL)
    example = (CLIENT / "examples" / "agent-loop.ts").read_text(encoding="utf-8")
    assert blocks, "docs/agents.md's TypeScript section shows no TypeScript"
    for block in blocks:
        assert block in example, (
            "docs/agents.md's TypeScript code differs from clients/typescript/examples/agent-loop.ts"
        )


def test_the_readme_snippet_type_checks_against_the_built_client(tmp_path: Path) -> None:
    """The README's TypeScript lines compile, strict, as a user's ES module importing the package."""
    built = _npm_run("build", 120)
    assert built.returncode == 0, built.stdout + built.stderr
    (snippet,) = re.findall(r"^```ts\n(.*?)^```$", (ROOT / "README.md").read_text(encoding="utf-8"), re.M | re.S)
    (tmp_path / "package.json").write_text('{"type": "module"}')
    (tmp_path / "node_modules").mkdir()
    (tmp_path / "node_modules" / "haki-context-client").symlink_to(CLIENT, target_is_directory=True)
    (tmp_path / "readme.ts").write_text(snippet, encoding="utf-8")
    options = ["--strict", "--module", "nodenext", "--target", "es2022", "--lib", "es2022,dom", "--skipLibCheck"]
    tsc = CLIENT / "node_modules" / ".bin" / "tsc"
    done = subprocess.run(
        [str(tsc), "--noEmit", *options, "readme.ts"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_generated_documents_match_the_schema_and_the_operations() -> None:
    check = _npm_run("check", 120)
    assert check.returncode == 0, check.stdout + check.stderr


def test_the_typescript_client_builds_and_its_tests_pass_against_a_live_server() -> None:
    done = _npm_run("test", 600)
    print(done.stdout, done.stderr)  # the full report, shown with -s or on failure
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    # Node's closing lines: `# pass 88` (TAP, when the output is no terminal) or `ℹ pass 88` (spec).
    totals = dict(re.findall(r"^(?:#|\u2139) (tests|pass|fail|cancelled|skipped) (\d+)$", done.stdout, re.MULTILINE))
    assert totals.get("fail") == "0" and totals.get("cancelled") == "0", totals
    assert int(totals.get("pass", "0")) > 0, done.stdout[-2000:]
    assert "executable was not found" not in done.stdout, "the live tests were skipped"
    if os.environ.get("CI"):
        assert totals.get("skipped") == "0", totals  # Chromium too is installed there
