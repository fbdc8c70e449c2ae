"""The limits of the safe GraphQL surface: tokens per document, depth, aliases and `context`
fields per operation. Each refuses with QUERY_TOO_COMPLEX, attached where it is raised."""

from __future__ import annotations

import itertools
from typing import Any, cast

from graphql import (
    ASTValidationRule,
    FieldNode,
    GraphQLError,
    OperationDefinitionNode,
    Source,
    TokenKind,
    ValidationContext,
    ValidationRule,
)
from graphql.language import FragmentSpreadNode, InlineFragmentNode, Lexer, SelectionSetNode
from strawberry.extensions.max_aliases import create_validator as alias_limit_rule
from strawberry.extensions.query_depth_limiter import create_validator as depth_limit_rule

from .errors import RequestErrorCode, coded

TOO_COMPLEX = RequestErrorCode.QUERY_TOO_COMPLEX


def check_token_count(document: str, max_tokens: int) -> None:
    """Refuse a document of more than `max_tokens` lexical tokens, comments included, before it
    is parsed: the parser's time and memory grow with the tokens. A lexical error met before the
    limit is raised as it is (a syntax error, for the parser's caller to code)."""
    lexer = Lexer(Source(document))
    token = lexer.token
    for count in itertools.count(1):
        token = lexer.read_next_token(token.end)
        if token.kind is TokenKind.EOF:
            return
        if count > max_tokens:
            raise GraphQLError(
                f"the document has more than {max_tokens} tokens (HAKI_MAX_TOKENS)",
                source=lexer.source,
                positions=[token.start],
                extensions={"code": TOO_COMPLEX.value},
            )


def depth_limit(max_depth: int) -> type[ASTValidationRule]:
    """Strawberry's depth rule (introspection fields not counted), refusing with QUERY_TOO_COMPLEX."""
    return _coded_rule(depth_limit_rule(max_depth, None), TOO_COMPLEX)


def alias_limit(max_aliases: int) -> type[ASTValidationRule]:
    """Strawberry's alias rule (aliases of the whole document), refusing with QUERY_TOO_COMPLEX."""
    return _coded_rule(alias_limit_rule(max_aliases), TOO_COMPLEX)


def _coded_rule(rule: type[ASTValidationRule], code: RequestErrorCode) -> type[ASTValidationRule]:
    """`rule`, each error it reports carrying `code`.

    Strawberry's rules report to the validation context directly (the alias rule before the
    rule object is set up), so the rule is handed a context that codes what it is told."""

    class CodedRule(rule):  # type: ignore[valid-type, misc]
        def __init__(self, context: ValidationContext) -> None:
            super().__init__(cast(ValidationContext, _CodingContext(context, code)))

    CodedRule.__name__ = CodedRule.__qualname__ = rule.__name__
    return CodedRule


class _CodingContext:
    """A validation context whose reported errors carry `code`; all else is the context's."""

    def __init__(self, context: ValidationContext, code: RequestErrorCode) -> None:
        self._context = context
        self._code = code

    def report_error(self, error: GraphQLError) -> None:
        self._context.report_error(coded(error, self._code))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)


# Root fields that assemble a packet: `replay` runs `context`'s work again, so it counts as one.
_ASSEMBLING = frozenset({"context", "replay"})


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
                        extensions={"code": TOO_COMPLEX.value},
                    )
                )

        def _count(self, selection_set: SelectionSetNode | None, seen: set[str]) -> int:
            if selection_set is None:
                return 0
            total = 0
            for selection in selection_set.selections:
                if isinstance(selection, FieldNode):
                    total += selection.name.value in _ASSEMBLING
                elif isinstance(selection, InlineFragmentNode):
                    total += self._count(selection.selection_set, seen)
                elif isinstance(selection, FragmentSpreadNode) and selection.name.value not in seen:
                    seen.add(selection.name.value)
                    fragment = self.context.get_fragment(selection.name.value)
                    total += self._count(fragment.selection_set if fragment else None, seen)
            return total

    return ContextFieldLimit
