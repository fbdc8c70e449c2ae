"""A leaner field executor for plain leaf fields.

A debugging selection resolves thousands of fields (every decision of a trace, each
with a dozen scores), and graphql-core's general path is costly per field
(docs/performance.md): a ResolveInfo built, Strawberry's resolver wrapper, two awaitable checks and a recursive
completion through the non-null wrapper. Most of those fields are plain attributes of
a frozen dataclass with a scalar or enum type, no arguments and no resolver: for them
the answer is `coerce_output_value(getattr(source, name))`, which is what the general
path computes too. Anything else (a resolver, arguments, an object or list type,
middleware) and any value the short path cannot finish (None on a non-null field, a
failed coercion) goes through graphql-core's own `execute_field`, so errors, their
paths and their messages are exactly graphql-core's.

Objects take the same short cut: `execute_fields` answers an object's plain leaves in
one loop (no Path, no method call per field) and hands each other field to
`execute_field`, awaiting what it returns as graphql-core does. Its plan per selection
is kept for the request (graphql-core hands every item of a list the same collected
field set).

It also codes the errors of the variables' coercion, which graphql-core runs when it builds
the execution context: INVALID_INPUT, attached there.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

from graphql import FieldNode, GraphQLField, GraphQLLeafType, GraphQLNonNull, GraphQLObjectType, is_leaf_type
from graphql.execution.collect_fields import FieldDetailsList, GroupedFieldSet
from graphql.pyutils import AwaitableOrValue, Path, Undefined, UndefinedType, gather_with_cancel
from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext
from strawberry.schema.schema_converter import GraphQLCoreConverter

from .errors import RequestErrorCode, coded


@dataclass(frozen=True, slots=True)
class _PlainLeaf:
    attribute: str
    type: GraphQLLeafType
    nullable: bool


# Cached "use the general path"; a sentinel whose `type` is never read, hence None for it.
_NOT_PLAIN = _PlainLeaf("", None, False)  # type: ignore[arg-type]
# Per object type of a schema (fields are not hashable), then per field name.
_plain_leaves: weakref.WeakKeyDictionary[GraphQLObjectType, dict[str, _PlainLeaf]] = weakref.WeakKeyDictionary()


def _plain_leaf(field_def: GraphQLField) -> _PlainLeaf:
    """How to read `field_def` directly, or _NOT_PLAIN."""
    definition = (field_def.extensions or {}).get(GraphQLCoreConverter.DEFINITION_BACKREF)
    resolver_is_default = getattr(field_def.resolve, "_is_default", False)  # Strawberry's mark on basic fields
    if definition is None or not resolver_is_default or not definition.is_basic_field or field_def.args:
        return _NOT_PLAIN
    nullable = not isinstance(field_def.type, GraphQLNonNull)
    inner = field_def.type.of_type if isinstance(field_def.type, GraphQLNonNull) else field_def.type
    if not is_leaf_type(inner) or definition.default_resolver is not getattr:
        return _NOT_PLAIN
    return _PlainLeaf(definition.python_name, inner, nullable)


class LeanExecutionContext(StrawberryGraphQLCoreExecutionContext):
    """Strawberry's execution context with a short path for plain leaf fields, alone or an object's."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Strawberry always passes a manager; it wraps resolvers only when an extension
        # implements `resolve` (a per-field hook), and then every field takes the general path.
        manager = self.middleware_manager
        self._short_path = manager is None or not manager.middlewares
        self._leaves: dict[GraphQLObjectType, dict[str, _PlainLeaf]] = {}  # this request's view of _plain_leaves
        # id(grouped field set) -> (the set, kept alive so the id stays its own; per field, _PlainLeaf or None)
        self._plans: dict[int, tuple[Any, list[tuple[str, Any, _PlainLeaf | None]]]] = {}

    @classmethod
    def build(cls, *args: Any, **kwargs: Any) -> Any:
        """The execution context, or the errors that refuse the request before execution, coded.

        Strawberry has chosen the operation before (an unknown or missing one is refused
        there), so what is refused here are the variables: each coerced against its
        definition (a missing, null, mistyped or out-of-range value): INVALID_INPUT.
        """
        built = super().build(*args, **kwargs)
        if isinstance(built, list):
            return [coded(error, RequestErrorCode.INVALID_INPUT) for error in built]
        return built

    def _leaf(self, parent_type: GraphQLObjectType, node: FieldNode) -> _PlainLeaf:
        """How to read the field `node` of `parent_type` directly, or _NOT_PLAIN."""
        if node.arguments:
            return _NOT_PLAIN
        leaves = self._leaves.get(parent_type)
        if leaves is None:
            leaves = self._leaves[parent_type] = _plain_leaves.setdefault(parent_type, {})
        name = node.name.value
        plain = leaves.get(name)
        if plain is None:
            field_def = self.schema.get_field(parent_type, name)
            plain = leaves[name] = _NOT_PLAIN if field_def is None else _plain_leaf(field_def)
        return plain

    def execute_field(
        self,
        parent_type: GraphQLObjectType,
        source: Any,
        field_details_list: FieldDetailsList,
        path: Path,
        position_context: Any,
    ) -> AwaitableOrValue[Any] | UndefinedType:
        if self._short_path:
            plain = self._leaf(parent_type, field_details_list[0].node)
            if plain is not _NOT_PLAIN:
                value = _read(plain, source)
                if value is not Undefined:
                    return value
        return super().execute_field(parent_type, source, field_details_list, path, position_context)

    def execute_fields(
        self,
        parent_type: GraphQLObjectType,
        source_value: Any,
        path: Path | None,
        grouped_field_set: GroupedFieldSet,
        position_context: Any,
    ) -> AwaitableOrValue[dict[str, Any]]:
        if not self._short_path:
            return super().execute_fields(parent_type, source_value, path, grouped_field_set, position_context)
        cached = self._plans.get(id(grouped_field_set))
        if cached is None:
            plan = []
            for response_name, field_details_list in grouped_field_set.items():
                plain = self._leaf(parent_type, field_details_list[0].node)
                plan.append((response_name, field_details_list, None if plain is _NOT_PLAIN else plain))
            cached = self._plans[id(grouped_field_set)] = (grouped_field_set, plan)
        results: dict[str, Any] = {}
        awaitable_fields: list[str] = []
        is_awaitable = self.is_awaitable
        try:
            for response_name, field_details_list, leaf in cached[1]:
                if leaf is not None:
                    value = _read(leaf, source_value)
                    if value is not Undefined:
                        results[response_name] = value
                        continue
                result = super().execute_field(
                    parent_type,
                    source_value,
                    field_details_list,
                    Path(path, response_name, parent_type.name),
                    position_context,
                )
                if result is not Undefined:
                    results[response_name] = result
                    if is_awaitable(result):
                        awaitable_fields.append(response_name)
        except Exception:
            if awaitable_fields:  # as graphql-core: settle what other fields started, they may fail too
                self.settle_in_background([results[name] for name in awaitable_fields])
            raise
        if not awaitable_fields:
            return results

        async def get_results() -> dict[str, Any]:
            awaited = await gather_with_cancel(*(results[name] for name in awaitable_fields))
            results.update(zip(awaitable_fields, awaited, strict=True))
            return results

        return get_results()


def _read(plain: _PlainLeaf, source: Any) -> Any:
    """The field's output value, or Undefined when the general path must answer (a null on a
    non-null field, a failed coercion: it raises the located error)."""
    try:
        value = getattr(source, plain.attribute)
        if value is None:
            return None if plain.nullable else Undefined
        coerced = plain.type.coerce_output_value(value)
    except Exception:  # the general path raises it again, located
        return Undefined
    return Undefined if coerced is None else coerced
