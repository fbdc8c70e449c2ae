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
                module = ".".join([*base, node.module or ""]).strip(".")
            else:
                module = node.module or ""
            names.add(module)
            if module.startswith("haki_context"):  # `from .. import memory`: a name may be a module of it
                names.update(f"{module}.{alias.name}" for alias in node.names)
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


# core/'s groups, top to bottom (docs/design.md, "Layers"): a group imports only the groups below
# it and the shared modules of core/ itself, which import no group.
CORE_GROUPS = ["history", "context", "memory", "serving", "embedding"]


def _core_imports(path: Path) -> set[str]:
    """The groups of core/ a module imports (by their package: haki_context.core.<group>)."""
    found = set()
    for name in _imports(path):
        parts = name.split(".")
        if parts[:2] == ["haki_context", "core"] and len(parts) > 2 and parts[2] in CORE_GROUPS:
            found.add(parts[2])
    return found


def test_core_is_grouped_and_holds_no_loose_module_of_a_group() -> None:
    core = PACKAGE / "core"
    assert sorted(p.name for p in core.iterdir() if p.is_dir() and (p / "__init__.py").exists()) == sorted(CORE_GROUPS)
    shared = sorted(p.stem for p in core.glob("*.py") if p.stem != "__init__")
    assert shared == ["errors", "limits", "models", "packet", "pagination", "progress", "records", "texts"]


@pytest.mark.parametrize("group", CORE_GROUPS)
def test_a_core_group_imports_only_the_groups_below_it(group: str) -> None:
    above = set(CORE_GROUPS[: CORE_GROUPS.index(group) + 1]) - {group}
    for path in sorted((PACKAGE / "core" / group).rglob("*.py")):
        wrong = _core_imports(path) & above
        assert not wrong, f"core/{group}/{path.name} imports the group(s) above it: {sorted(wrong)}"


def test_the_shared_modules_of_core_import_no_group() -> None:
    for path in sorted((PACKAGE / "core").glob("*.py")):
        assert not _core_imports(path), f"core/{path.name} imports {sorted(_core_imports(path))}"


def test_no_private_name_is_imported_across_modules() -> None:
    """A name with a leading underscore is its module's own: no other module of the package imports it."""
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                private = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
                assert not private, f"{path.relative_to(PACKAGE)} imports private {private} from {node.module}"


# Functions a framework calls by its own rules: the MCP SDK builds a tool's published input schema
# from its signature (mcp_server/server.py).
POSITIONAL_ALLOWED = {("mcp_server/server.py", "assert_fact")}


def test_a_function_of_more_than_five_values_takes_the_rest_by_name() -> None:
    """asyncpg's rule: past the first few, a long signature's values are keyword-only, so a call
    names what each value binds to."""
    for path in sorted(PACKAGE.rglob("*.py")):
        where = str(path.relative_to(PACKAGE))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                positional = [a.arg for a in node.args.posonlyargs + node.args.args if a.arg not in ("self", "cls")]
                if len(positional) > 5 and (where, node.name) not in POSITIONAL_ALLOWED:
                    raise AssertionError(
                        f"{where}:{node.lineno} {node.name} takes {len(positional)} values by position"
                    )
