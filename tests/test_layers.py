"""Imports go schema -> resolvers -> core -> db only; SQL lives in db, Strawberry in schema (and the view)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "haki_context"
LAYERS = ["schema", "resolvers", "core", "db"]
SQL = re.compile(r"\b(SELECT|INSERT INTO|UPDATE \w+ SET|DELETE FROM)\b")


def _modules(layer: str) -> list[Path]:
    return sorted((PACKAGE / layer).rglob("*.py"))


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the module's package
                base = path.relative_to(PACKAGE.parent).parent.parts[
                    : len(path.relative_to(PACKAGE.parent).parent.parts) - (node.level - 1)
                ]
                names.add(".".join([*base, node.module or ""]).strip("."))
            else:
                names.add(node.module or "")
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


@pytest.mark.parametrize("layer", LAYERS)
def test_a_layer_imports_only_layers_below_it(layer: str) -> None:
    above = LAYERS[: LAYERS.index(layer)]
    for path in _modules(layer):
        for name in _imports(path):
            for upper in above:
                assert not name.startswith(f"haki_context.{upper}"), f"{path.name} imports {name}"


@pytest.mark.parametrize("layer", ["core", "db", "resolvers"])
def test_strawberry_types_stay_in_schema(layer: str) -> None:
    for path in _modules(layer):
        strawberry = {n for n in _imports(path) if n.startswith("strawberry")}
        allowed = {"strawberry.dataloader"} if layer == "resolvers" else set()
        assert strawberry <= allowed, f"{path.name} imports {strawberry - allowed}"


@pytest.mark.parametrize("layer", ["schema", "resolvers", "core"])
def test_sql_lives_only_in_db(layer: str) -> None:
    for path in _modules(layer):
        found = SQL.findall(path.read_text())
        assert not found, f"{path.relative_to(PACKAGE)} holds SQL: {found[:3]}"
