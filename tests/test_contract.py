"""The served schema keeps the public contract, and `schema.graphql` is its exported SDL."""

from __future__ import annotations

from pathlib import Path

import pytest
from graphql import build_schema
from graphql.utilities import DangerousChangeType, find_breaking_changes, find_dangerous_changes

from haki_context.schema import export, export_sdl

ROOT = Path(__file__).resolve().parents[1]
# The public API as first published: the served schema may add to it, never rename or drop.
CONTRACT = ROOT / "tests" / "data" / "contract.graphql"

# Additions the contract allows (an optional argument; a value added to an enum, which clients
# are told to expect: docs/dashboards.md, "Decisions and reason codes"); anything else graphql-core calls
# dangerous fails, and a value removed is a breaking change.
ALLOWED_DANGEROUS = {DangerousChangeType.OPTIONAL_ARG_ADDED, DangerousChangeType.VALUE_ADDED_TO_ENUM}


@pytest.fixture(scope="module")
def contract_sdl() -> str:
    return CONTRACT.read_text()


def test_exported_sdl_is_up_to_date() -> None:
    committed = (ROOT / "schema.graphql").read_text()
    assert committed == export_sdl(), "schema.graphql is stale: run `python -m haki_context.schema.export`"


def test_export_rewrites_a_file_in_place_or_prints_to_standard_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "schema.graphql"
    target.write_text("stale")
    export.main(str(target))
    assert target.read_text() == export_sdl() and "rewritten in place" in capsys.readouterr().out
    export.main("-")
    assert capsys.readouterr().out == export_sdl()


def test_schema_has_no_breaking_change_against_the_contract(contract_sdl: str) -> None:
    breaking = find_breaking_changes(build_schema(contract_sdl), build_schema(export_sdl()))
    assert breaking == [], "\n".join(f"{c.type.name}: {c.description}" for c in breaking)


def test_schema_keeps_every_default_and_enum_of_the_contract(contract_sdl: str) -> None:
    dangerous = find_dangerous_changes(build_schema(contract_sdl), build_schema(export_sdl()))
    unexpected = [c for c in dangerous if c.type not in ALLOWED_DANGEROUS]
    assert unexpected == [], "\n".join(f"{c.type.name}: {c.description}" for c in unexpected)


def test_every_contract_type_and_field_is_served(contract_sdl: str) -> None:
    contract, ours = build_schema(contract_sdl), build_schema(export_sdl())
    for name, ctype in contract.type_map.items():
        if name.startswith("__"):
            continue
        assert name in ours.type_map, f"missing type {name}"
        fields = getattr(ctype, "fields", None)
        if fields:
            missing = set(fields) - set(ours.type_map[name].fields)  # type: ignore[attr-defined]
            assert not missing, f"{name} lacks {sorted(missing)}"


def test_the_check_catches_a_changed_default(contract_sdl: str) -> None:
    """The comparison itself can fail: a changed default and a changed nullability are caught."""
    changed = contract_sdl.replace("budget: Int = 900", "budget: Int = 800")
    dangerous = find_dangerous_changes(build_schema(contract_sdl), build_schema(changed))
    assert any(c.type is DangerousChangeType.ARG_DEFAULT_VALUE_CHANGE for c in dangerous)
    nonnull = contract_sdl.replace("first: Int = 50", "first: Int! = 50")
    assert find_breaking_changes(build_schema(contract_sdl), build_schema(nonnull))
    dropped = contract_sdl.replace("  VOLATILITY_EXPIRED ", "  # VOLATILITY_EXPIRED ")
    assert dropped != contract_sdl and find_breaking_changes(build_schema(contract_sdl), build_schema(dropped))
