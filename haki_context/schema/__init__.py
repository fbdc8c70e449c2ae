"""The GraphQL schema: Strawberry types, enums, scalars, inputs and the Schema object."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

import strawberry
from graphql import ASTValidationRule, GraphQLError
from strawberry.extensions import AddValidationRules, DisableIntrospection, SchemaExtension, ValidationCache
from strawberry.schema.config import StrawberryConfig
from strawberry.types import ExecutionContext

from ..core.errors import HakiError
from ..settings import Settings
from .errors import is_unexpected
from .execution import LeanExecutionContext
from .limits import alias_limit, context_field_limit, depth_limit
from .mutation import Mutation
from .observe import ObserveOperations
from .query import Query
from .scalars import DateTime
from .stages import Parsing, ValidationCodes
from .subscription import Subscription, SubscriptionsOverSockets
from .writes import AwaitTraceWrites, ConsistencyToken


class HakiSchema(strawberry.Schema):
    """Logs only unexpected errors: expected ones (bad input, not found...) are answers, not crashes."""

    def process_errors(self, errors: list[GraphQLError], execution_context: ExecutionContext | None = None) -> None:
        unexpected = [e for e in errors if is_unexpected(e)]
        if unexpected:
            super().process_errors(unexpected, execution_context)


def build_schema(
    *,
    max_depth: int = 10,
    max_aliases: int = 15,
    max_tokens: int = 2000,
    max_context_fields: int = 5,
    introspection: bool = True,
) -> strawberry.Schema:
    """The schema with its limits. Extensions are passed as factories, never shared instances."""
    # The limit rules are classes made once: the validation cache is keyed by the document
    # *and* the rule classes, and QueryDepthLimiter / MaxAliasesLimiter make new classes per
    # instance, which would make every request miss it (docs/performance.md).
    rules: list[type[ASTValidationRule]] = [
        depth_limit(max_depth),
        alias_limit(max_aliases),
        context_field_limit(max_context_fields),
    ]
    extensions: list[type[SchemaExtension] | Callable[[], SchemaExtension]] = [
        # Agents send the same few documents over and over: parse and validate each once.
        # Each step codes the errors it raises (schema/stages.py).
        lambda: Parsing(max_tokens=max_tokens, cache_size=256),
        lambda: ValidationCache(maxsize=256),
        ValidationCodes,
        lambda: AddValidationRules(rules),
        ConsistencyToken,  # before AwaitTraceWrites: it ends after it, once the traces committed
        AwaitTraceWrites,
        SubscriptionsOverSockets,
        ObserveOperations,
    ]
    if not introspection:
        extensions.append(DisableIntrospection)
    return HakiSchema(
        query=Query,
        mutation=Mutation,
        subscription=Subscription,
        extensions=extensions,
        config=StrawberryConfig(scalar_map={datetime: DateTime}, disable_field_suggestions=not introspection),
        execution_context_class=LeanExecutionContext,
    )


def export_sdl() -> str:
    """The SDL of the schema as served (what `schema.graphql` at the root holds)."""
    return build_schema().as_str() + "\n"


__all__ = ["HakiError", "build_schema", "export_sdl"]


def schema_for(settings: Settings) -> strawberry.Schema:
    """The schema with the limits `settings` gives: the one every transport serves."""
    return build_schema(
        max_depth=settings.max_query_depth,
        max_aliases=settings.max_aliases,
        max_tokens=settings.max_tokens,
        max_context_fields=settings.max_context_fields,
        introspection=settings.introspection,
    )
