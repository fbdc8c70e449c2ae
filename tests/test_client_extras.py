"""The Python client's adapter extras and the root's test pins agree.

The client declares ranges (`langgraph`, `openai-agents` extras: a library installs beside an
application's own versions); the root pins exact versions, the ones the adapters' tests run with:
LangGraph's in its `test` extra, the Agents SDK's in an `openai-agents` extra of its own (it caps
websockets below the server's). Each pin must lie inside its range, or CI would test versions a
user of the extra never gets.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent


def optional_dependencies(pyproject: Path) -> dict[str, list[Requirement]]:
    extras = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    return {name: [Requirement(line) for line in lines] for name, lines in extras.items()}


# Each client extra, and the root extra that pins it for the tests.
PINNED_IN = {"langgraph": "test", "openai-agents": "openai-agents"}


def test_every_adapter_dependency_is_pinned_for_the_tests_inside_its_range() -> None:
    client = optional_dependencies(ROOT / "clients" / "python" / "pyproject.toml")
    root = optional_dependencies(ROOT / "pyproject.toml")
    assert set(client) == set(PINNED_IN)
    for extra, root_extra in PINNED_IN.items():
        pins = {req.name: req for req in root[root_extra]}
        for ranged in client[extra]:
            pinned = pins.get(ranged.name)
            assert pinned is not None, f"the root's {root_extra} extra does not pin {ranged.name} (client's {extra})"
            (exact,) = pinned.specifier
            assert exact.operator == "==", f"the root's {root_extra} extra pins {pinned}: exactly, with =="
            assert ranged.specifier.contains(exact.version), f"{pinned} lies outside the client's {ranged}"
