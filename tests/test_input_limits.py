"""Every input limit of docs/design.md "Errors" answers with its typed code, never a traceback or SQL text.

One test per limit; each checks the boundary value that is still accepted
where that is cheap, so a limit cannot drift by one.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from conftest import GraphQLClient, client_for, make_settings

from haki_context.core.limits import try_parse_id
from haki_context.core.serving.runtime import Runtime

RECORD = "mutation($input: EventInput!) { recordEvent(input: $input) { id } }"
RECORD_MANY = "mutation($inputs: [EventInput!]!) { recordEvents(inputs: $inputs) { id } }"
ASSERT = "mutation($input: FactInput!) { assertFact(input: $input) { outcome fact { id } } }"
RETRACT = "mutation($id: ID!, $reason: String) { retractFact(id: $id, reason: $reason) { id } }"
OPEN = "mutation($ids: [ID!]!, $reason: String) { openConflict(factIds: $ids, reason: $reason) { id } }"
RESOLVE = "mutation($id: ID!, $keep: ID!) { resolveConflict(id: $id, keepFactId: $keep) { id } }"
DISMISS = "mutation($id: ID!) { dismissConflict(id: $id) { id } }"
FACTS = "query($s: String!, $first: Int) { facts(subjectId: $s, first: $first) { edges { cursor } } }"
EVENTS = "query($s: String!, $first: Int) { events(subjectId: $s, first: $first) { edges { cursor } } }"
CONFLICTS = "query($s: String, $first: Int) { conflicts(subjectId: $s, first: $first) { edges { cursor } } }"

LEAK_MARKERS = ("Traceback", 'File "', "SELECT ", "INSERT ", "UPDATE ", "asyncpg", "psycopg", "violates", "DETAIL")


def check_error(body: dict[str, Any], code: str) -> dict[str, Any]:
    """The response failed with `code` as its first error, and no error leaks internals."""
    assert body.get("errors"), f"expected {code}, got {body}"
    for error in body["errors"]:
        text = json.dumps(error)
        for marker in LEAK_MARKERS:
            assert marker not in text, f"{marker!r} leaked in {text}"
    first: dict[str, Any] = body["errors"][0]
    assert first["extensions"]["code"] == code, body
    return first


async def expect(
    client: GraphQLClient, code: str, query: str, variables: dict[str, Any] | None = None
) -> dict[str, Any]:
    return check_error((await client.post(query, variables)).json(), code)


def event(subject: str, **fields: Any) -> dict[str, Any]:
    return {"input": {"subjectId": subject, "kind": "note", "payload": {"text": "x"}, **fields}}


def fact(subject: str, **fields: Any) -> dict[str, Any]:
    return {"input": {"subjectId": subject, "predicate": "p", "value": "v", **fields}}


async def new_fact_id(client: GraphQLClient, subject: str, predicate: str = "p") -> str:
    data = await client.execute(ASSERT, fact(subject, predicate=predicate, mode="ADD"))
    fact_id: str = data["assertFact"]["fact"]["id"]
    return fact_id


# ---------------------------------------------------------------- lengths


@pytest.mark.parametrize("bad", ["", "   ", "s" * 129])
async def test_subject_id_must_be_1_to_128_characters(client: GraphQLClient, bad: str) -> None:
    await expect(client, "INVALID_INPUT", RECORD, event(bad))
    await expect(client, "INVALID_INPUT", ASSERT, fact(bad))
    await expect(client, "INVALID_INPUT", FACTS, {"s": bad})
    await expect(client, "INVALID_INPUT", EVENTS, {"s": bad})
    await expect(client, "INVALID_INPUT", CONFLICTS, {"s": bad})


async def test_subject_id_of_128_characters_is_accepted(client: GraphQLClient) -> None:
    subject = ("s" + uuid.uuid4().hex) * 4
    subject = subject[:128]
    await client.execute(RECORD, event(subject))
    await client.execute(ASSERT, fact(subject))


@pytest.mark.parametrize("bad", ["", " ", "k" * 129])
async def test_kind_must_be_1_to_128_characters(client: GraphQLClient, subject: str, bad: str) -> None:
    await expect(client, "INVALID_INPUT", RECORD, event(subject, kind=bad))
    await client.execute(RECORD, event(subject, kind="k" * 128))


@pytest.mark.parametrize("bad", ["", " ", "p" * 129])
async def test_predicate_must_be_1_to_128_characters(client: GraphQLClient, subject: str, bad: str) -> None:
    await expect(client, "INVALID_INPUT", ASSERT, fact(subject, predicate=bad))
    await client.execute(ASSERT, fact(subject, predicate="p" * 128))


async def test_reason_must_be_1_to_2000_characters(client: GraphQLClient, subject: str) -> None:
    a, b = await new_fact_id(client, subject, "a"), await new_fact_id(client, subject, "b")
    for bad in ("", "r" * 2001):
        await expect(client, "INVALID_INPUT", RETRACT, {"id": a, "reason": bad})
        await expect(client, "INVALID_INPUT", OPEN, {"ids": [a, b], "reason": bad})
    await client.execute(OPEN, {"ids": [a, b], "reason": "r" * 2000})
    c = await new_fact_id(client, subject, "c")
    await client.execute(RETRACT, {"id": c, "reason": "r" * 2000})


# ---------------------------------------------------------------- sizes


async def test_payload_over_256_kib_serialized_is_invalid_input(client: GraphQLClient, subject: str) -> None:
    limit = 256 * 1024
    filler = "a" * (limit - len('{"t":""}'))
    await client.execute(RECORD, event(subject, payload={"t": filler}))  # exactly 256 KiB: accepted
    err = await expect(client, "INVALID_INPUT", RECORD, event(subject, payload={"t": filler + "a"}))
    assert filler not in err["message"]
    # Multi-byte characters count as bytes.
    await expect(client, "INVALID_INPUT", RECORD, event(subject, payload={"t": "é" * (limit // 2)}))


async def test_fact_value_over_256_kib_serialized_is_invalid_input(client: GraphQLClient, subject: str) -> None:
    await expect(client, "INVALID_INPUT", ASSERT, fact(subject, value="v" * (256 * 1024)))


async def test_batch_over_1000_events_is_invalid_input(client: GraphQLClient, subject: str) -> None:
    inputs = [{"subjectId": subject, "kind": "note", "payload": {}} for _ in range(1001)]
    await expect(client, "INVALID_INPUT", RECORD_MANY, {"inputs": inputs})


@pytest.mark.parametrize("first", [0, -1, 101, 2**31 - 1])
@pytest.mark.parametrize("query", [FACTS, EVENTS, CONFLICTS])
async def test_first_must_be_1_to_100(client: GraphQLClient, subject: str, query: str, first: int) -> None:
    await expect(client, "INVALID_INPUT", query, {"s": subject, "first": first})


@pytest.mark.parametrize("count", [0, 1, 251])
async def test_open_conflict_takes_2_to_250_ids(client: GraphQLClient, subject: str, count: int) -> None:
    real = await new_fact_id(client, subject)
    ids = [real] + [str(uuid.uuid4()) for _ in range(count - 1)] if count else []
    await expect(client, "INVALID_INPUT", OPEN, {"ids": ids})


# ---------------------------------------------------------------- numbers and dates


@pytest.mark.parametrize("bad", [-0.01, 1.01, -1, 2])
async def test_confidence_must_be_within_0_and_1(client: GraphQLClient, subject: str, bad: float) -> None:
    await expect(client, "INVALID_INPUT", ASSERT, fact(subject, confidence=bad))
    await expect(
        client,
        "INVALID_INPUT",
        f'mutation {{ assertFact(input: {{subjectId: "{subject}", predicate: "p", value: 1, confidence: {bad}}}) {{ outcome }} }}',
    )


async def test_confidence_bounds_are_accepted(client: GraphQLClient, subject: str) -> None:
    for i, ok in enumerate((0, 0.0, 1, 1.0, 0.5)):
        await client.execute(ASSERT, fact(subject, predicate=f"c{i}", confidence=ok))


@pytest.mark.parametrize("raw", ["NaN", "Infinity", "1e400"])
async def test_non_finite_confidence_is_invalid_input(client: GraphQLClient, subject: str, raw: str) -> None:
    # JSON has no NaN, but Python's (and the server's) JSON reader accepts these tokens.
    variables = json.dumps(fact(subject)).replace('"value": "v"', f'"value": "v", "confidence": {raw}')
    response = await client.http.post(
        "/graphql",
        content=f'{{"query": {json.dumps(ASSERT)}, "variables": {variables}}}',
        headers={"content-type": "application/json"},
    )
    check_error(response.json(), "INVALID_INPUT")


async def test_valid_to_must_be_after_valid_from(client: GraphQLClient, subject: str) -> None:
    start = "2026-01-01T00:00:00+00:00"
    await expect(client, "INVALID_INPUT", ASSERT, fact(subject, validFrom=start, validTo=start))
    await expect(client, "INVALID_INPUT", ASSERT, fact(subject, validFrom=start, validTo="2025-12-31T23:59:59+00:00"))
    # The same instant written with another offset is still not after.
    await expect(client, "INVALID_INPUT", ASSERT, fact(subject, validFrom=start, validTo="2026-01-01T01:00:00+01:00"))
    await client.execute(ASSERT, fact(subject, validFrom=start, validTo="2026-01-01T00:00:01+00:00"))


@pytest.mark.parametrize(
    "bad",
    ["2026-01-01T00:00:00", "2026-01-01", "yesterday", "", "2026-13-01T00:00:00+00:00"],
)
async def test_date_without_an_offset_or_malformed_is_invalid_input_as_a_variable(
    client: GraphQLClient, subject: str, bad: str
) -> None:
    await expect(client, "INVALID_INPUT", RECORD, event(subject, occurredAt=bad))
    await expect(client, "INVALID_INPUT", ASSERT, fact(subject, validFrom=bad))
    await expect(client, "INVALID_INPUT", ASSERT, fact(subject, validTo=bad))


@pytest.mark.parametrize("bad", ["2026-01-01T00:00:00", "not a date"])
async def test_date_without_an_offset_or_malformed_is_invalid_input_inline(
    client: GraphQLClient, subject: str, bad: str
) -> None:
    await expect(
        client,
        "INVALID_INPUT",
        f'mutation {{ recordEvent(input: {{subjectId: "{subject}", kind: "k", payload: {{}}, occurredAt: "{bad}"}}) {{ id }} }}',
    )
    await expect(
        client,
        "INVALID_INPUT",
        f'mutation {{ assertFact(input: {{subjectId: "{subject}", predicate: "p", value: 1, validFrom: "{bad}"}}) {{ outcome }} }}',
    )


async def test_a_date_that_is_not_a_string_is_invalid_input(client: GraphQLClient, subject: str) -> None:
    await expect(client, "INVALID_INPUT", RECORD, event(subject, occurredAt=1767225600))


async def test_dates_with_z_or_an_offset_are_accepted(client: GraphQLClient, subject: str) -> None:
    for i, ok in enumerate(("2026-01-01T00:00:00Z", "2026-01-01T00:00:00.123456-05:30", "2026-01-01T00:00:00+00:00")):
        await client.execute(RECORD, event(subject, occurredAt=ok))
        await client.execute(ASSERT, fact(subject, predicate=f"d{i}", validFrom=ok))


# ---------------------------------------------------------------- NUL characters


@pytest.mark.parametrize(
    "variables",
    [
        pytest.param(lambda s: (RECORD, event(s, kind="a\x00b")), id="kind"),
        pytest.param(lambda s: (RECORD, event(s + "\x00")), id="event-subject"),
        pytest.param(lambda s: (RECORD, event(s, payload={"text": "a\x00b"})), id="payload-string"),
        pytest.param(lambda s: (RECORD, event(s, payload={"a\x00": 1})), id="payload-key"),
        pytest.param(lambda s: (RECORD, event(s, payload=["x", ["\x00"]])), id="payload-nested"),
        pytest.param(lambda s: (ASSERT, fact(s, predicate="p\x00")), id="predicate"),
        pytest.param(lambda s: (ASSERT, fact(s, value="v\x00")), id="fact-value"),
        pytest.param(lambda s: (ASSERT, fact(s + "\x00")), id="fact-subject"),
    ],
)
async def test_nul_in_stored_text_is_invalid_input(client: GraphQLClient, subject: str, variables: Any) -> None:
    query, values = variables(subject)
    await expect(client, "INVALID_INPUT", query, values)
    assert (await client.execute(EVENTS, {"s": subject}))["events"]["edges"] == []
    assert (await client.execute(FACTS, {"s": subject}))["facts"]["edges"] == []


async def test_nul_in_a_reason_is_invalid_input(client: GraphQLClient, subject: str) -> None:
    fact_id = await new_fact_id(client, subject)
    await expect(client, "INVALID_INPUT", RETRACT, {"id": fact_id, "reason": "because\x00"})


# ---------------------------------------------------------------- ids


async def test_writes_naming_unknown_ids_are_not_found(client: GraphQLClient, subject: str) -> None:
    real = await new_fact_id(client, subject)
    unknown = str(uuid.uuid4())
    await expect(client, "NOT_FOUND", RETRACT, {"id": unknown})
    await expect(client, "NOT_FOUND", OPEN, {"ids": [real, unknown]})
    await expect(client, "NOT_FOUND", RESOLVE, {"id": unknown, "keep": real})
    await expect(client, "NOT_FOUND", DISMISS, {"id": unknown})


@pytest.mark.parametrize("bad", ["nope", "1234", "x" * 129, "", f"{uuid.uuid4()}x"])
async def test_malformed_ids_are_invalid_input(client: GraphQLClient, subject: str, bad: str) -> None:
    real = await new_fact_id(client, subject)
    await expect(client, "INVALID_INPUT", RETRACT, {"id": bad})
    await expect(client, "INVALID_INPUT", OPEN, {"ids": [real, bad]})
    await expect(client, "INVALID_INPUT", RESOLVE, {"id": bad, "keep": real})
    await expect(client, "INVALID_INPUT", DISMISS, {"id": bad})
    await expect(client, "INVALID_INPUT", ASSERT, fact(subject, sourceEventIds=[bad]))


async def test_reads_by_malformed_id_are_null_not_errors(client: GraphQLClient) -> None:
    data = await client.execute('{ fact(id: "nope") { id } event(id: "x") { id } }')
    assert data == {"fact": None, "event": None}


def test_an_id_reads_as_python_s_uuid_does_in_any_form() -> None:
    u = str(uuid.uuid4())
    forms = [
        u,
        u.upper(),
        "{" + u + "}",
        "urn:uuid:" + u,
        u.replace("-", ""),
        u + "\n",
        " " + u,
        u[:-1] + "g",
        "nope",
        "",
    ]
    for raw in forms:
        try:
            expected: str | None = str(uuid.UUID(raw))
        except ValueError:
            expected = None
        assert try_parse_id(raw) == expected, raw


# ---------------------------------------------------------------- body size


@pytest.fixture
async def small_body_client(runtime: Runtime, migrated: str) -> AsyncIterator[GraphQLClient]:
    c = client_for(runtime, make_settings(migrated, max_body_bytes=1024))
    yield c
    await c.http.aclose()


async def test_request_body_over_the_limit_is_413_payload_too_large(
    small_body_client: GraphQLClient, subject: str
) -> None:
    response = await small_body_client.post(RECORD, event(subject, payload={"text": "y" * 2000}))
    assert response.status_code == 413
    check_error(response.json(), "PAYLOAD_TOO_LARGE")
    # Under the limit the same server answers normally.
    ok = await small_body_client.post(RECORD, event(subject))
    assert ok.status_code == 200 and not ok.json().get("errors")


async def test_streamed_body_over_the_limit_is_413_payload_too_large(
    small_body_client: GraphQLClient, subject: str
) -> None:
    payload = json.dumps({"query": RECORD, "variables": event(subject, payload={"text": "y" * 4000})}).encode()

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: the limit must hold while reading
        for start in range(0, len(payload), 500):
            yield payload[start : start + 500]

    response = await small_body_client.http.post(
        "/graphql", content=chunks(), headers={"content-type": "application/json"}
    )
    assert response.status_code == 413
    check_error(response.json(), "PAYLOAD_TOO_LARGE")


async def test_a_lying_content_length_cannot_smuggle_a_large_body(small_body_client: GraphQLClient) -> None:
    body = json.dumps({"query": "{ __typename }", "variables": {"pad": "z" * 3000}}).encode()

    async def chunks() -> AsyncIterator[bytes]:
        yield body

    response = await small_body_client.http.post(
        "/graphql", content=chunks(), headers={"content-type": "application/json", "content-length": "10"}
    )
    assert response.status_code == 413
    check_error(response.json(), "PAYLOAD_TOO_LARGE")


# ---------------------------------------------------------------- operation complexity


async def test_query_deeper_than_10_is_query_too_complex(client: GraphQLClient) -> None:
    fact_id = str(uuid.uuid4())
    nested = "id"
    for _ in range(12):
        nested = f"supersededBy {{ {nested} }}"
    await expect(client, "QUERY_TOO_COMPLEX", f'{{ fact(id: "{fact_id}") {{ {nested} }} }}')
    shallow = "id"
    for _ in range(3):
        shallow = f"supersededBy {{ {shallow} }}"
    await client.execute(f'{{ fact(id: "{fact_id}") {{ {shallow} }} }}')


async def test_more_than_15_aliases_is_query_too_complex(client: GraphQLClient) -> None:
    many = " ".join(f'a{i}: fact(id: "{uuid.uuid4()}") {{ id }}' for i in range(16))
    await expect(client, "QUERY_TOO_COMPLEX", f"{{ {many} }}")
    fifteen = " ".join(f'a{i}: fact(id: "{uuid.uuid4()}") {{ id }}' for i in range(15))
    await client.execute(f"{{ {fifteen} }}")


async def test_more_than_2000_tokens_is_query_too_complex(client: GraphQLClient) -> None:
    fields = " ".join(["id"] * 2100)
    await expect(client, "QUERY_TOO_COMPLEX", f'{{ fact(id: "{uuid.uuid4()}") {{ {fields} }} }}')


@pytest.mark.parametrize(
    "query,variables",
    [
        pytest.param(FACTS, {"s": "s", "first": "ten"}, id="string-for-int"),
        pytest.param(RECORD, {"input": {"subjectId": "s", "kind": "k", "payload": None}}, id="null-for-non-null"),
        pytest.param(FACTS, {}, id="missing-variable"),
    ],
)
async def test_a_variable_of_the_wrong_type_is_a_coded_error_not_internal(
    client: GraphQLClient, query: str, variables: dict[str, Any]
) -> None:
    body = (await client.post(query, variables)).json()
    assert body["errors"][0]["extensions"]["code"] in {"INVALID_INPUT", "GRAPHQL_VALIDATION_FAILED"}, body
    check_error(body, body["errors"][0]["extensions"]["code"])
