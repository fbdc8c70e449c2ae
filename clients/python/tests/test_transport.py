"""Retries and error mapping, against scripted HTTP answers (httpx.MockTransport).

The server's own answers are tested live in test_live_server.py; here the answers a live server
gives only under a fault (503 with Retry-After, a proxy's page) are scripted.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest
from haki_context_client import (
    HakiClient,
    HakiClientSync,
    HttpStatusError,
    InvalidInputError,
    InvalidResponseError,
    RetryPolicy,
    StatementTimeoutError,
    TransportError,
    UnauthenticatedError,
    UnavailableError,
)
from haki_context_client._transport import retry_after_seconds
from haki_context_client.types import ReasonCode

NO_WAIT = RetryPolicy(attempts=4, base_delay_s=0.0, max_delay_s=0.0, max_total_s=5.0)
STATS = {
    "stats": {
        "contextCalls": 3,
        "injectionRate": 1.0,
        "emptyCalls": 0,
        "noRelevantMemoryCalls": 0,
        "degradedCalls": 0,
        "avgFactsServed": 1.0,
        "avgUsedTokens": 12.0,
        "latencyP50Ms": 5.0,
        "latencyP95Ms": 9.0,
        "activeFacts": 1,
        "events": 2,
        "openConflicts": 0,
        "oldestOpenConflictSeconds": None,
        "reasonCodes": [{"reasonCode": "TOP_SCORE", "count": 3}],
    }
}


def unavailable(retry_after: str | None = "0") -> httpx.Response:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    body = {"data": None, "errors": [{"message": "database unavailable", "extensions": {"code": "UNAVAILABLE"}}]}
    return httpx.Response(503, json=body, headers=headers)


def coded(code: str, status: int = 200) -> httpx.Response:
    return httpx.Response(
        status, json={"data": None, "errors": [{"message": f"a {code}", "extensions": {"code": code}}]}
    )


class Script:
    """Answers requests in order, the last one again when it runs out; keeps the requests."""

    def __init__(self, *answers: httpx.Response | Callable[[httpx.Request], httpx.Response]) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers[min(len(self.requests), len(self.answers)) - 1]
        return answer(request) if callable(answer) else answer


def sync_client(script: Script, retry: RetryPolicy = NO_WAIT, api_key: str | None = "hk_test") -> HakiClientSync:
    return HakiClientSync("http://haki.test", api_key=api_key, retry=retry, transport=httpx.MockTransport(script))


def test_unavailable_twice_then_an_answer_is_retried_until_it_succeeds() -> None:
    script = Script(unavailable(), unavailable(), httpx.Response(200, json={"data": STATS}))
    with sync_client(script) as haki:
        stats = haki.stats()
    assert stats.context_calls == 3 and stats.reason_codes[0].count == 3
    assert len(script.requests) == 3
    bodies = [json.loads(r.content) for r in script.requests]
    assert all(b == bodies[0] for b in bodies), "a retry sends the same request"


def test_a_value_a_newer_server_added_to_an_enum_is_read_as_it_is() -> None:
    newer = {"stats": {**STATS["stats"], "reasonCodes": [{"reasonCode": "SOME_NEW_REASON", "count": 2}]}}
    with sync_client(Script(httpx.Response(200, json={"data": newer}))) as haki:
        stats = haki.stats()
    (row,) = stats.reason_codes
    assert row.reason_code.value == "SOME_NEW_REASON" and row.reason_code == "SOME_NEW_REASON" and row.count == 2
    assert type(row.reason_code) is ReasonCode and ReasonCode("TOP_SCORE") is ReasonCode.TOP_SCORE


async def test_the_async_client_retries_unavailable_too() -> None:
    script = Script(unavailable(), unavailable(), httpx.Response(200, json={"data": STATS}))
    async with HakiClient("http://haki.test", retry=NO_WAIT, transport=httpx.MockTransport(script)) as haki:
        stats = await haki.stats()
    assert stats.active_facts == 1
    assert len(script.requests) == 3


def test_unavailable_beside_a_field_that_answered_is_not_retried() -> None:
    # The document's first mutation was written; its second met a concurrent write and was
    # rolled back. Sending the document again would write the first one twice.
    body = {
        "data": {"a": {"id": "e1"}, "b": None},
        "errors": [{"message": "rolled back; retry it", "path": ["b"], "extensions": {"code": "UNAVAILABLE"}}],
    }
    script = Script(httpx.Response(200, json=body), httpx.Response(200, json={"data": {"a": {"id": "e2"}, "b": None}}))
    with sync_client(script) as haki, pytest.raises(UnavailableError) as raised:
        haki.execute("mutation { a: recordEvent(input: {}) { id } b: recordEvent(input: {}) { id } }")
    assert len(script.requests) == 1
    assert raised.value.data == {"a": {"id": "e1"}, "b": None}


def test_unavailable_is_raised_once_the_tries_are_spent() -> None:
    script = Script(unavailable(retry_after="0"))
    with (
        sync_client(script, RetryPolicy(attempts=3, base_delay_s=0.0, max_total_s=5.0)) as haki,
        pytest.raises(UnavailableError) as raised,
    ):
        haki.stats()
    assert len(script.requests) == 3
    assert raised.value.code == "UNAVAILABLE" and raised.value.status_code == 503
    assert raised.value.retry_after == 0.0


def test_a_retry_after_beyond_the_total_time_is_not_waited_for() -> None:
    script = Script(unavailable(retry_after="120"))
    with (
        sync_client(script, RetryPolicy(attempts=5, max_total_s=30.0)) as haki,
        pytest.raises(UnavailableError) as raised,
    ):
        haki.stats()
    assert len(script.requests) == 1
    assert raised.value.retry_after == 120.0


def test_a_503_without_a_graphql_body_is_unavailable_and_retried() -> None:
    script = Script(httpx.Response(503, text="upstream down"), httpx.Response(200, json={"data": STATS}))
    with sync_client(script) as haki:
        assert haki.stats().events == 2
    assert len(script.requests) == 2


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (coded("INVALID_INPUT"), InvalidInputError),
        (coded("TIMEOUT"), StatementTimeoutError),
        (coded("UNAUTHENTICATED", 401), UnauthenticatedError),
        (httpx.Response(502, text="<html>bad gateway</html>"), HttpStatusError),
        (httpx.Response(200, text="not json"), InvalidResponseError),
    ],
)
def test_other_failures_are_raised_at_once_without_a_retry(answer: httpx.Response, error: type[Exception]) -> None:
    script = Script(answer, httpx.Response(200, json={"data": STATS}))
    with sync_client(script) as haki, pytest.raises(error):
        haki.stats()
    assert len(script.requests) == 1


def test_the_error_carries_the_code_message_and_every_error_of_the_response() -> None:
    errors = [
        {"message": "budget must be positive", "extensions": {"code": "INVALID_INPUT", "field": "budget"}},
        {"message": "second", "extensions": {"code": "NOT_FOUND"}},
    ]
    script = Script(httpx.Response(200, json={"data": None, "errors": errors}))
    with sync_client(script) as haki, pytest.raises(InvalidInputError) as raised:
        haki.stats()
    assert raised.value.code == "INVALID_INPUT"
    assert raised.value.message == "budget must be positive"
    assert raised.value.extensions == {"code": "INVALID_INPUT", "field": "budget"}
    assert raised.value.errors == errors
    assert str(raised.value) == "INVALID_INPUT: budget must be positive"


def test_an_unknown_code_is_a_plain_haki_error_with_that_code() -> None:
    from haki_context_client import HakiError

    script = Script(coded("SOMETHING_NEW"))
    with sync_client(script) as haki, pytest.raises(HakiError) as raised:
        haki.stats()
    assert type(raised.value) is HakiError and raised.value.code == "SOMETHING_NEW"


def test_no_answer_is_a_transport_error_and_is_not_retried() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    script = Script(refuse)
    with sync_client(script) as haki, pytest.raises(TransportError) as raised:
        haki.stats()
    assert isinstance(raised.value.__cause__, httpx.ConnectError)
    assert raised.value.code == "TRANSPORT_ERROR"
    assert len(script.requests) == 1


def test_the_key_goes_in_a_bearer_header_and_unset_arguments_are_left_out() -> None:
    script = Script(httpx.Response(200, json={"data": STATS}))
    with sync_client(script, api_key="hk_abc") as haki:
        haki.stats()
    request = script.requests[0]
    assert request.headers["authorization"] == "Bearer hk_abc"
    assert request.url.path == "/graphql"
    assert "application/graphql-response+json" in request.headers["accept"]
    body = json.loads(request.content)
    assert body["operationName"] == "Stats" and body["variables"] == {}


def test_without_a_key_no_authorization_header_is_sent() -> None:
    script = Script(httpx.Response(200, json={"data": STATS}))
    with sync_client(script, api_key=None) as haki:
        haki.stats()
    assert "authorization" not in script.requests[0].headers


def test_the_backoff_grows_is_bounded_and_never_shorter_than_retry_after() -> None:
    policy = RetryPolicy(attempts=6, base_delay_s=1.0, max_delay_s=4.0, max_total_s=100.0)
    for failed, ceiling in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 4.0)]:
        wait = policy.delay(failed, None, 0.0)
        assert wait is not None and ceiling / 2 <= wait <= ceiling
    assert policy.delay(1, 7.0, 0.0) == 7.0
    assert policy.delay(6, None, 0.0) is None, "no try left in count"
    assert policy.delay(1, 7.0, 95.0) is None, "no time left"


def test_retry_after_reads_seconds_and_http_dates() -> None:
    now = datetime(2026, 8, 1, 10, 0, tzinfo=UTC)
    assert retry_after_seconds("3") == 3.0
    assert retry_after_seconds(format_datetime(now + timedelta(seconds=5), usegmt=True), now=now) == 5.0
    assert retry_after_seconds("soon") is None
    assert retry_after_seconds(None) is None


def test_a_retry_policy_without_tries_is_refused() -> None:
    with pytest.raises(ValueError):
        RetryPolicy(attempts=0)


def test_a_base_url_given_with_its_graphql_path_is_accepted() -> None:
    script = Script(httpx.Response(200, json={"data": STATS}))
    with HakiClientSync("http://haki.test/graphql/", retry=NO_WAIT, transport=httpx.MockTransport(script)) as haki:
        haki.stats()
    assert str(script.requests[0].url) == "http://haki.test/graphql"


def test_the_sync_and_async_clients_offer_the_same_methods() -> None:
    import inspect

    def public(cls: type) -> dict[str, list[str]]:
        return {
            name: list(inspect.signature(member).parameters)
            for name, member in inspect.getmembers(cls, inspect.isfunction)
            if not name.startswith("_") and name not in {"close", "aclose"}
        }

    assert public(HakiClient) == public(HakiClientSync)


HEADER = {"format": "haki-context/subject", "version": 1, "subjectId": "s", "exportedAt": "2026-08-01T10:00:00+00:00"}
EVENT = {"type": "event", "id": "e1", "kind": "note", "payload": {}}


def ndjson(*records: dict[str, object]) -> httpx.Response:
    body = "".join(json.dumps(r) + "\n" for r in records)
    return httpx.Response(200, text=body, headers={"Content-Type": "application/x-ndjson"})


def test_an_export_cut_before_its_end_line_raises_after_the_lines_it_got() -> None:
    from haki_context_client import IncompleteExportError

    script = Script(ndjson(HEADER, EVENT))
    got: list[dict[str, object]] = []
    with sync_client(script) as haki, pytest.raises(IncompleteExportError) as raised:
        for line in haki.export_subject("s"):
            got.append(line)
    assert got == [HEADER, EVENT]
    assert raised.value.code == "INCOMPLETE_EXPORT"


def test_an_export_whose_end_line_miscounts_is_incomplete() -> None:
    from haki_context_client import IncompleteExportError

    script = Script(ndjson(HEADER, EVENT, {"type": "end", "events": 2, "facts": 0, "conflicts": 0}))
    with sync_client(script) as haki, pytest.raises(IncompleteExportError):
        list(haki.export_subject("s"))


async def test_an_export_refused_as_unavailable_is_retried_before_any_line() -> None:
    end = {"type": "end", "events": 1, "facts": 0, "conflicts": 0}
    script = Script(unavailable(), ndjson(HEADER, EVENT, end))
    async with HakiClient("http://haki.test", retry=NO_WAIT, transport=httpx.MockTransport(script)) as haki:
        lines = [line async for line in haki.export_subject("s")]
    assert lines == [HEADER, EVENT, end]
    assert [r.url.path for r in script.requests] == ["/export", "/export"]
    assert script.requests[0].url.params["subjectId"] == "s"
