"""The steps before execution, as Strawberry extensions that code the errors they raise:
parsing (after the token limit) and validation.

Coercing the variables, the last step before execution, codes its errors in
`execution.LeanExecutionContext.build`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator

from graphql import DocumentNode, GraphQLError, GraphQLSyntaxError, OperationDefinitionNode, parse
from strawberry.extensions import SchemaExtension

from .errors import RequestErrorCode, coded
from .limits import check_token_count


def parse_document(document: str, max_tokens: int) -> DocumentNode:
    """The parsed document: QUERY_TOO_COMPLEX past `max_tokens` tokens, GRAPHQL_PARSE_FAILED for
    a syntax error (lexical or grammatical, or nesting past what the parser can follow)."""
    try:
        check_token_count(document, max_tokens)
        return parse(document)
    except GraphQLSyntaxError as error:
        raise coded(error, RequestErrorCode.PARSE_FAILED) from None


@functools.cache
def _cached_parser(maxsize: int) -> Callable[[str, int], DocumentNode]:
    # One LRU per size, shared by every request (extensions are made per request). A document
    # that fails raises again each time: errors are not cached.
    return functools.lru_cache(maxsize=maxsize)(parse_document)


def check_operation_chosen(document: DocumentNode, operation_name: str | None) -> None:
    """A document of several operations needs `operationName` to say which one runs
    (GraphQL spec, GetOperation): GRAPHQL_VALIDATION_FAILED, rather than running the first."""
    if operation_name is not None:
        return
    operations = sum(isinstance(d, OperationDefinitionNode) for d in document.definitions)
    if operations > 1:
        raise coded(
            GraphQLError("Must provide operationName when the document holds several operations."),
            RequestErrorCode.VALIDATION_FAILED,
        )


class Parsing(SchemaExtension):
    """Parses each distinct document once (agents send the same few over and over), counting its
    tokens first, and refuses a document of several operations that names none."""

    def __init__(self, *, max_tokens: int, cache_size: int = 256) -> None:
        super().__init__()
        self._max_tokens = max_tokens
        self._parse = _cached_parser(cache_size)

    def on_parse(self) -> Iterator[None]:
        execution_context = self.execution_context
        assert execution_context.query is not None  # Strawberry refuses a missing query before parsing
        document = self._parse(execution_context.query, self._max_tokens)
        # Strawberry's `operation_name` falls back to the first operation's; the name the request
        # gave is only in its private field.
        check_operation_chosen(document, getattr(execution_context, "_provided_operation_name", None))
        execution_context.graphql_document = document
        yield


class ValidationCodes(SchemaExtension):
    """Codes each error of the validation step GRAPHQL_VALIDATION_FAILED, unless its rule gave its
    own (the limits give QUERY_TOO_COMPLEX).

    Its hook ends after every extension's validation (ValidationCache) and Strawberry's own.
    The cached errors are coded in place: the same code each time.
    """

    def on_validate(self) -> Iterator[None]:
        yield
        for error in self.execution_context.pre_execution_errors or ():
            coded(error, RequestErrorCode.VALIDATION_FAILED)
