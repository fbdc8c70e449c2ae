"""A leaner field executor for plain leaf fields.

A debugging selection resolves thousands of fields (every decision of a trace, each
with a dozen scores), and graphql-core's general path costs ~8 us a field: a
ResolveInfo built, Strawberry's resolver wrapper, two awaitable checks and a recursive
completion through the non-null wrapper. Most of those fields are plain attributes of
a frozen dataclass with a scalar or enum type, no arguments and no resolver: for them
the answer is `coerce_output_value(getattr(source, name))`, which is what the general
path computes too. Anything else (a resolver, arguments, an object or list type,
middleware) and any value the short path cannot finish (None on a non-null field, a
failed coercion) goes through graphql-core's own `execute_field`, so errors, their
paths and their messages are exactly graphql-core's.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

from graphql import GraphQLField, GraphQLLeafType, GraphQLNonNull, GraphQLObjectType, is_leaf_type
from graphql.pyutils import Undefined
from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext
from strawberry.schema.schema_converter import GraphQLCoreConverter


@dataclass(frozen=True, slots=True)
class _PlainLeaf:
    attribute: str
    type: GraphQLLeafType
    nullable: bool


_NOT_PLAIN = _PlainLeaf("", None, False)  # type: ignore[arg-type]  # cached "use the general path"
# Per object type of a schema (fields are not hashable), then per field name.
_plain_leaves: weakref.WeakKeyDictionary[GraphQLObjectType, dict[str, _PlainLeaf]] = weakref.WeakKeyDictionary()


def _plain_leaf(field_def: GraphQLField) -> _PlainLeaf:
    """How to read `field_def` directly, or _NOT_PLAIN."""
    definition = (field_def.extensions or {}).get(GraphQLCoreConverter.DEFINITION_BACKREF)
    resolver_is_default = getattr(field_def.resolve, "_is_default", False)  # Strawberry's mark on basic fields
    if definition is None or not resolver_is_default or not definition.is_basic_field or field_def.args:
        return _NOT_PLAIN
    nullable = not isinstance(field_def.type, GraphQLNonNull)
    inner = field_def.type if nullable else field_def.type.of_type
    if not is_leaf_type(inner) or definition.default_resolver is not getattr:
        return _NOT_PLAIN
    return _PlainLeaf(definition.python_name, inner, nullable)


class LeanExecutionContext(StrawberryGraphQLCoreExecutionContext):
    """Strawberry's execution context with a short path for plain leaf fields."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Strawberry always passes a manager; it wraps resolvers only when an extension
        # implements `resolve` (a per-field hook), and then every field takes the general path.
        manager = self.middleware_manager
        self._short_path = manager is None or not manager.middlewares
        self._leaves: dict[GraphQLObjectType, dict[str, _PlainLeaf]] = {}  # this request's view of _plain_leaves

    def execute_field(self, parent_type, source, field_details_list, path, position_context):  # type: ignore[no-untyped-def]
        node = field_details_list[0].node
        if self._short_path and not node.arguments:
            leaves = self._leaves.get(parent_type)
            if leaves is None:
                leaves = self._leaves[parent_type] = _plain_leaves.setdefault(parent_type, {})
            name = node.name.value
            plain = leaves.get(name)
            if plain is None:
                field_def = self.schema.get_field(parent_type, name)
                plain = leaves[name] = _NOT_PLAIN if field_def is None else _plain_leaf(field_def)
            if plain is not _NOT_PLAIN:
                try:
                    value = getattr(source, plain.attribute)
                    if value is None:
                        if plain.nullable:
                            return None
                    else:
                        coerced = plain.type.coerce_output_value(value)
                        if coerced is not None and coerced is not Undefined:
                            return coerced
                except Exception:  # noqa: BLE001 - the general path below raises it again, located
                    pass
        return super().execute_field(parent_type, source, field_details_list, path, position_context)
