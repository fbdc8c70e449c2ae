"""The JSON Schema of what a GraphQL operation returns, read from the served schema.

A tool's `outputSchema` is derived from the operation the tool runs, so the schema a client
validates against can never drift from the data the operation selects: every field selected
is required, a nullable field admits null, enums list their values, and each property carries
the GraphQL field's description.
"""

from __future__ import annotations

from typing import Any

from graphql import (
    FieldNode,
    GraphQLEnumType,
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLOutputType,
    GraphQLScalarType,
    GraphQLSchema,
    OperationDefinitionNode,
    OperationType,
    SelectionSetNode,
    parse,
)

# The schema's scalars as JSON Schema: a custom scalar's JSON form, a built-in's type.
SCALARS: dict[str, dict[str, Any]] = {
    "String": {"type": "string"},
    "ID": {"type": "string"},
    "Int": {"type": "integer"},
    "Float": {"type": "number"},
    "Boolean": {"type": "boolean"},
    "DateTime": {"type": "string", "format": "date-time"},
    "JSON": {},  # any JSON value
}


def result_schema(schema: GraphQLSchema, document: str) -> dict[str, Any]:
    """The JSON Schema of the `data` of the one operation in `document`."""
    operation = _operation(document)
    root = schema.mutation_type if operation.operation is OperationType.MUTATION else schema.query_type
    if root is None:
        raise ValueError(f"the schema has no {operation.operation.value} type")
    return _object(root, operation.selection_set, nullable=False)


def _operation(document: str) -> OperationDefinitionNode:
    operations = [d for d in parse(document).definitions if isinstance(d, OperationDefinitionNode)]
    if len(operations) != 1:
        raise ValueError("a tool's document holds exactly one operation")
    return operations[0]


def _object(parent: GraphQLObjectType, selection: SelectionSetNode, *, nullable: bool) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    for node in selection.selections:
        if not isinstance(node, FieldNode):
            raise ValueError("fragments are not supported in a tool's document")
        key = node.alias.value if node.alias else node.name.value
        if node.name.value == "__typename":
            properties[key] = {"type": "string"}
            continue
        field = parent.fields.get(node.name.value)
        if field is None:
            raise ValueError(f"{parent.name} has no field {node.name.value}")
        described = _type(field.type, node.selection_set)
        if field.description:
            described = {**described, "description": field.description}
        properties[key] = described
    shape = {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}
    return _or_null(shape) if nullable else shape


def _type(kind: GraphQLOutputType, selection: SelectionSetNode | None, *, nullable: bool = True) -> dict[str, Any]:
    if isinstance(kind, GraphQLNonNull):
        return _type(kind.of_type, selection, nullable=False)
    if isinstance(kind, GraphQLList):
        shape: dict[str, Any] = {"type": "array", "items": _type(kind.of_type, selection)}
    elif isinstance(kind, GraphQLObjectType):
        if selection is None:
            raise ValueError(f"{kind.name} needs a selection")
        return _object(kind, selection, nullable=nullable)
    elif isinstance(kind, GraphQLEnumType):
        shape = {"type": "string", "enum": list(kind.values)}
    elif isinstance(kind, GraphQLScalarType):
        if kind.name not in SCALARS:
            raise ValueError(f"no JSON Schema for the scalar {kind.name}")
        shape = dict(SCALARS[kind.name])
    else:
        raise ValueError(f"unsupported output type {kind}")
    return _or_null(shape) if nullable else shape


def _or_null(shape: dict[str, Any]) -> dict[str, Any]:
    if not shape:  # any JSON value admits null already
        return shape
    return {"anyOf": [shape, {"type": "null"}]}
