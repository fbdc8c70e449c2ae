"""The Python client's adapter extras and the root's test pins agree.

The client declares ranges (`langgraph`, `openai-agents` extras: a library installs beside an
application's own versions); the root's `test` extra pins exact versions, the ones the adapters'
tests run with. Each pin must lie inside its range, or CI would test versions a user of the extra
never gets.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent


def optional_dependencies(pyproject: Path) -> dict[str, list[Requirement]]:
    extras = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    return {name: [Requirement(line) for line in lines] for name, lines in extras.items()}


def test_every_adapter_dependency_is_pinned_for_the_tests_inside_its_range() -> None:
    client = optional_dependencies(ROOT / "clients" / "python" / "pyproject.toml")
    pins = {req.name: req for req in optional_dependencies(ROOT / "pyproject.toml")["test"]}
    assert set(client) >= {"langgraph", "openai-agents"}
    for extra in ("langgraph", "openai-agents"):
        for ranged in client[extra]:
            pinned = pins.get(ranged.name)
            assert pinned is not None, f"the root's test extra does not pin {ranged.name} (client extra {extra})"
            (exact,) = pinned.specifier
            assert exact.operator == "==", f"the root's test extra pins {pinned}: exactly, with =="
            assert ranged.specifier.contains(exact.version), f"{pinned} lies outside the client's {ranged}"
