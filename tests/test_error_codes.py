"""Each request error carries the code of the step that raised it: the parser
(GRAPHQL_PARSE_FAILED), the validation rules (GRAPHQL_VALIDATION_FAILED; the limits
QUERY_TOO_COMPLEX), the coercion of variables (INVALID_INPUT). No code is read from a message."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg
import pytest
from conftest import GraphQLClient, client_for
from contextlib_helpers import with_settings
from graphql import GraphQLError, GraphQLSyntaxError, Source

from haki_context.core.serving.runtime import Runtime
from haki_context.schema.errors import format_error, http_status, is_unexpected
from haki_context.schema.limits import check_token_count

FACTS = "query($s: String!, $n: Int) { facts(subjectId: $s, first: $n) { edges { cursor } } }"


async def code_of(client: GraphQLClient, query: str, variables: dict[str, Any] | None = None) -> str:
    return str((await client.error(query, variables))["extensions"]["code"])


async def test_an_unused_variable_is_a_validation_failure_not_invalid_input(client: GraphQLClient) -> None:
    error = await client.error("query($id: ID!) { __typename }", {"id": "x"})
    assert error["message"].startswith("Variable '$id' is never used")
    assert error["extensions"]["code"] == "GRAPHQL_VALIDATION_FAILED"
    # ...also when its value would not coerce: validation comes first
    assert await code_of(client, "query($id: ID!) { __typename }", {"id": None}) == "GRAPHQL_VALIDATION_FAILED"


@pytest.mark.parametrize(
    "query",
    ["{", "query { __typename", "{ __typename ¤ }", '{ fact(id: "unterminated) { id } }', "{" * 600 + "}" * 600],
    ids=["eof", "unclosed", "bad-character", "unterminated-string", "nested-too-deep"],
)
async def test_a_document_that_does_not_parse_is_parse_failed(client: GraphQLClient, query: str) -> None:
    assert await code_of(client, query) == "GRAPHQL_PARSE_FAILED"


@pytest.mark.parametrize(
    "query",
    [
        "{ noSuchField }",
        '{ facts(subjectId: "s", noSuchArgument: 1) { edges { cursor } } }',
        "{ facts { edges { cursor } } }",  # a required argument missing
        "{ facts(subjectId: 42) { edges { cursor } } }",  # a literal of the wrong type
        "query Q { __typename } query Q { __typename }",
        "query($s: String!) { facts(subjectId: $t) { edges { cursor } } }",  # an undefined variable
        "{ __typename } fragment F on Query { __typename }",  # an unused fragment
    ],
)
async def test_a_rule_of_the_graphql_spec_that_fails_is_validation_failed(client: GraphQLClient, query: str) -> None:
    assert await code_of(client, query, {"s": "x"} if "$s" in query else None) == "GRAPHQL_VALIDATION_FAILED"


async def test_introspection_switched_off_is_validation_failed(runtime: Runtime) -> None:
    closed = client_for(with_settings(runtime, introspection=False))
    try:
        assert await code_of(closed, "{ __schema { queryType { name } } }") == "GRAPHQL_VALIDATION_FAILED"
    finally:
        await closed.http.aclose()


@pytest.mark.parametrize(
    ("variables", "field"),
    [
        ({"n": 1}, "s"),  # a required variable missing
        ({"s": None}, "s"),  # null for a non-null variable
        ({"s": "x", "n": "ten"}, "n"),  # the wrong type
        ({"s": "x", "n": 2**40}, "n"),  # out of Int's range
    ],
)
async def test_variables_that_do_not_coerce_are_invalid_input(
    client: GraphQLClient, variables: dict[str, Any], field: str
) -> None:
    error = await client.error(FACTS, variables)
    assert error["extensions"]["code"] == "INVALID_INPUT", error
    assert error["message"].startswith(f"Variable '${field}'")


async def test_every_limit_is_query_too_complex_from_its_own_check(client: GraphQLClient) -> None:
    deep = f'{{ fact(id: "{uuid.uuid4()}") {{ {"supersededBy { " * 11}id{" }" * 11} }} }}'
    aliases = "{ " + " ".join(f"a{i}: __typename" for i in range(16)) + " }"
    contexts = "{ " + " ".join(f'c{i}: context(subjectId: "s", query: "q") {{ traceId }}' for i in range(6)) + " }"
    tokens = "{ " + " ".join(["__typename"] * 2001) + " }"
    comments = "# a comment\n" * 2001 + "{ __typename }"  # comments count: the parser keeps them too
    for query in (deep, aliases, contexts, tokens, comments):
        assert await code_of(client, query) == "QUERY_TOO_COMPLEX", query[:60]


def test_the_token_limit_counts_up_to_its_bound_and_lets_a_syntax_error_before_it_through() -> None:
    check_token_count("{ a b c }", 5)  # 5 tokens: within
    with pytest.raises(GraphQLError) as over:
        check_token_count("{ a b c d }", 5)
    assert over.value.extensions == {"code": "QUERY_TOO_COMPLEX"}
    assert over.value.locations and over.value.locations[0].column == 11  # at the first token past the bound
    with pytest.raises(GraphQLSyntaxError):  # a lexical error before the bound is the parser's to code
        check_token_count("{ ¤ " + "a " * 10 + "}", 5)


def test_an_error_without_a_code_from_its_source_is_internal_whatever_its_message() -> None:
    for message in ("Syntax Error: Expected Name, found <EOF>.", "Variable '$x' got invalid value 1.", "tokens"):
        error = GraphQLError(message, source=Source("{"), positions=[0])
        assert is_unexpected(error)
        formatted = format_error(error)
        assert formatted["extensions"]["code"] == "INTERNAL"
        assert message not in formatted["message"]


async def test_a_coded_error_keeps_its_code_when_its_document_is_sent_again(client: GraphQLClient) -> None:
    query = "query($id: ID!) { __typename }"
    for _ in range(3):  # the later answers come from the parse and validation caches
        assert await code_of(client, query, {"id": "x"}) == "GRAPHQL_VALIDATION_FAILED"


@pytest.mark.parametrize(
    "exc",
    [asyncpg.exceptions.DeadlockDetectedError("deadlock detected"), asyncpg.exceptions.SerializationError("x")],
    ids=["deadlock", "serialization"],
)
def test_a_write_rolled_back_by_a_concurrent_one_is_unavailable_to_be_retried(exc: Exception) -> None:
    formatted = format_error(
        GraphQLError("deadlock detected DETAIL: Process 7 waits for ShareLock", original_error=exc)
    )
    assert formatted["extensions"]["code"] == "UNAVAILABLE"
    assert formatted["message"].endswith("retry it") and "Process" not in formatted["message"]


def test_unavailable_is_503_only_when_no_root_field_answered() -> None:
    unavailable = [{"message": "retry it", "path": ["b"], "extensions": {"code": "UNAVAILABLE"}}]
    assert http_status(unavailable, data=None) == 503
    assert http_status(unavailable, data={"a": None, "b": None}) == 503
    # an earlier mutation of the document was written: a client must not send it again
    assert http_status(unavailable, data={"a": {"id": "e1"}, "b": None}) is None


def test_a_rollback_of_unknown_outcome_is_not_told_to_retry() -> None:
    unknown = asyncpg.exceptions.StatementCompletionUnknownError("x")  # 40003: written or not, unknown
    assert format_error(GraphQLError("x", original_error=unknown))["extensions"]["code"] == "INTERNAL"
