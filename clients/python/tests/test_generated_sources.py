"""The generated code is up to date with schema.graphql and queries.graphql, checked without the
generator: the client's operations validate against the schema of today, and the inputs hash as
they did when `clients/python/generate.py` last ran."""

from __future__ import annotations

import hashlib
from pathlib import Path

import graphql

CLIENT_ROOT = Path(__file__).resolve().parents[1]
REPO_ROOT = CLIENT_ROOT.parents[1]
GENERATED = CLIENT_ROOT / "src" / "haki_context_client" / "_generated"
REGENERATE = "run `python3 clients/python/generate.py` and commit src/haki_context_client/_generated"


def recorded_hashes() -> dict[str, str]:
    """path (relative to the repository root) -> SHA-256, as generate.py recorded them."""
    lines = (GENERATED / "sources.sha256").read_text(encoding="utf-8").splitlines()
    return {path: digest for digest, path in (line.split("  ", 1) for line in lines if line.strip())}


def test_the_client_operations_validate_against_the_current_schema() -> None:
    schema = graphql.build_schema((REPO_ROOT / "schema.graphql").read_text(encoding="utf-8"))
    document = graphql.parse((CLIENT_ROOT / "queries.graphql").read_text(encoding="utf-8"))
    errors = graphql.validate(schema, document)
    assert not errors, f"queries.graphql does not validate against schema.graphql: {[e.message for e in errors]}"


def test_the_generated_code_was_generated_from_the_current_inputs() -> None:
    recorded = recorded_hashes()
    assert {"schema.graphql", "clients/python/queries.graphql"} <= set(recorded), recorded
    for path, digest in recorded.items():
        current = hashlib.sha256((REPO_ROOT / path).read_bytes()).hexdigest()
        assert current == digest, f"{path} changed since the client was generated: {REGENERATE}"


def test_every_operation_of_the_operations_file_is_generated_for_both_clients() -> None:
    from haki_context_client._generated.async_operations import AsyncOperations
    from haki_context_client._generated.sync_operations import SyncOperations

    document = graphql.parse((CLIENT_ROOT / "queries.graphql").read_text(encoding="utf-8"))
    names = [d.name.value for d in document.definitions if isinstance(d, graphql.OperationDefinitionNode) and d.name]
    for name in names:
        method = "".join("_" + c.lower() if c.isupper() else c for c in name).lstrip("_")
        assert callable(getattr(AsyncOperations, method, None)), f"no async {method} for {name}: {REGENERATE}"
        assert callable(getattr(SyncOperations, method, None)), f"no sync {method} for {name}: {REGENERATE}"
