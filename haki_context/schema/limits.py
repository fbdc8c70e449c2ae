"""Validation rules of the safe GraphQL surface that Strawberry does not ship."""

from __future__ import annotations

from graphql import FieldNode, GraphQLError, OperationDefinitionNode, ValidationRule
from graphql.language import FragmentSpreadNode, InlineFragmentNode, SelectionSetNode


def context_field_limit(max_fields: int) -> type[ValidationRule]:
    """A rule allowing at most `max_fields` `context` root fields per operation.

    `context` embeds, retrieves and writes a trace, and graphql-core runs root
    query fields concurrently: aliases would multiply that work.
    """

    class ContextFieldLimit(ValidationRule):
        def enter_operation_definition(self, node: OperationDefinitionNode, *_: object) -> None:
            count = self._count(node.selection_set, set())
            if count > max_fields:
                self.report_error(
                    GraphQLError(
                        f"{count} `context` fields in one operation; at most {max_fields} are allowed",
                        node,
                        extensions={"code": "QUERY_TOO_COMPLEX"},
                    )
                )

        def _count(self, selection_set: SelectionSetNode | None, seen: set[str]) -> int:
            if selection_set is None:
                return 0
            total = 0
            for selection in selection_set.selections:
                if isinstance(selection, FieldNode):
                    total += selection.name.value == "context"
                elif isinstance(selection, InlineFragmentNode):
                    total += self._count(selection.selection_set, seen)
                elif isinstance(selection, FragmentSpreadNode) and selection.name.value not in seen:
                    seen.add(selection.name.value)
                    fragment = self.context.get_fragment(selection.name.value)
                    total += self._count(fragment.selection_set if fragment else None, seen)
            return total

    return ContextFieldLimit
