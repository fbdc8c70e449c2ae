"""Read-your-writes: the client keeps its mutations' consistency token and sends it back.

The server is faked with httpx.MockTransport: each answer may carry a token in the
`Haki-Consistency-Token` header or in `extensions.consistencyToken`, as a server with read
replicas gives one after a write.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from haki_context_client import HakiClient, HakiClientSync, RetryPolicy, UnavailableError
from haki_context_client._consistency import document_operations, is_mutation, token_position

HEADER = "Haki-Consistency-Token"
NO_WAIT = RetryPolicy(attempts=4, base_delay_s=0.0, max_delay_s=0.0, max_total_s=5.0)
EVENT: dict[str, Any] = {
    "id": "e1",
    "subjectId": "s",
    "kind": "note",
    "payload": {},
    "occurredAt": "2026-08-01T10:00:00+00:00",
    "recordedAt": "2026-08-01T10:00:00+00:00",
    "excerpt": "",
}
PACKET: dict[str, Any] = {
    "context": {
        "traceId": "t1",
        "rendered": "",
        "status": "OK",
        "emptyReason": None,
        "warnings": [],
        "budgetTokens": 900,
        "usedTokens": 0,
        "facts": [],
        "episodes": [],
    }
}
EVENTS_PAGE: dict[str, Any] = {"events": {"edges": [], "pageInfo": {"hasNextPage": False, "endCursor": None}}}


def answer(data: dict[str, Any] | None, *, header: str | None = None, extension: Any = None) -> httpx.Response:
    """A GraphQL answer, with a token in its header and/or its extensions."""
    body: dict[str, Any] = {"data": data}
    if extension is not None:
        body["extensions"] = {"consistencyToken": extension}
    return httpx.Response(200, json=body, headers={HEADER: header} if header is not None else {})


def recorded(header: str | None = None, extension: Any = None) -> httpx.Response:
    return answer({"recordEvent": EVENT}, header=header, extension=extension)


def packet(header: str | None = None) -> httpx.Response:
    return answer(PACKET, header=header)


def events_page() -> httpx.Response:
    return answer(EVENTS_PAGE)


class Script:
    """Answers requests in order, the last one again when it runs out; keeps the requests."""

    def __init__(self, *answers: httpx.Response | Callable[[httpx.Request], httpx.Response]) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        found = self.answers[min(len(self.requests), len(self.answers)) - 1]
        return found(request) if callable(found) else found

    def sent(self) -> list[str | None]:
        """The token each request sent, in order (None: no header)."""
        return [r.headers.get(HEADER) for r in self.requests]


def client(script: Script, **options: Any) -> HakiClientSync:
    return HakiClientSync("http://haki.test", retry=NO_WAIT, transport=httpx.MockTransport(script), **options)


def record(haki: HakiClientSync) -> None:
    haki.record_event("s", "note", {})


# ------------------------------------------------------------------------- the sync client


def test_no_token_is_sent_before_any_write() -> None:
    script = Script(events_page())
    with client(script) as haki:
        haki.events("s")
        haki.events("s")
        assert haki.consistency_token is None
    assert script.sent() == [None, None]


def test_a_mutation_response_token_in_the_header_is_adopted_and_sent_on_the_next_query() -> None:
    script = Script(recorded(header="0/16B3748"), events_page())
    with client(script) as haki:
        record(haki)
        assert haki.consistency_token == "0/16B3748"
        haki.events("s")
    assert script.sent() == [None, "0/16B3748"]


def test_a_mutation_response_token_in_the_extensions_is_adopted_and_sent_on_the_next_query() -> None:
    script = Script(recorded(extension="0/16B3748"), events_page())
    with client(script) as haki:
        record(haki)
        assert haki.consistency_token == "0/16B3748"
        haki.events("s")
    assert script.sent() == [None, "0/16B3748"]


def test_the_header_token_is_read_before_the_extensions_one() -> None:
    script = Script(recorded(header="0/20", extension="0/30"))
    with client(script) as haki:
        record(haki)
        assert haki.consistency_token == "0/20"


def test_the_token_is_sent_on_the_next_mutation_too() -> None:
    script = Script(recorded(header="0/20"), recorded(header="0/30"))
    with client(script) as haki:
        record(haki)
        record(haki)
        assert haki.consistency_token == "0/30"
    assert script.sent() == [None, "0/20"]


def test_the_highest_of_two_tokens_is_kept_compared_as_log_positions() -> None:
    # 0/100 is past 0/FF although it sorts before it as text; 1/0 is past 0/FFFFFFFF.
    script = Script(recorded(header="0/100"), recorded(header="0/FF"), events_page())
    with client(script) as haki:
        record(haki)
        record(haki)
        assert haki.consistency_token == "0/100"
        haki.events("s")
    assert script.sent() == [None, "0/100", "0/100"]
    script = Script(recorded(header="0/FFFFFFFF"), recorded(header="1/0"), recorded(header="0/FFFFFFFF"))
    with client(script) as haki:
        for _ in range(3):
            record(haki)
        assert haki.consistency_token == "1/0"


def test_a_query_response_token_is_not_adopted() -> None:
    # A context call writes its trace: adopting its token would make the next context call wait
    # for that trace to reach a replica.
    script = Script(packet(header="0/16B3748"), packet(header="0/16B3800"))
    with client(script) as haki:
        haki.context("s", "anything")
        haki.context("s", "anything")
        assert haki.consistency_token is None
    assert script.sent() == [None, None]


def test_a_query_response_token_lower_than_the_held_one_leaves_it_as_it_is() -> None:
    script = Script(recorded(header="0/20"), packet(header="0/40"), events_page())
    with client(script) as haki:
        record(haki)
        haki.context("s", "anything")
        haki.events("s")
        assert haki.consistency_token == "0/20"
    assert script.sent() == [None, "0/20", "0/20"]


def test_with_adopt_query_tokens_a_query_response_token_is_adopted() -> None:
    script = Script(packet(header="0/40"), events_page())
    with client(script, adopt_query_tokens=True) as haki:
        haki.context("s", "anything")
        haki.events("s")
        assert haki.consistency_token == "0/40"
    assert script.sent() == [None, "0/40"]


@pytest.mark.parametrize(
    "token", ["garbage", "", "0/", "/16B3748", "0/16B3748/1", "123456789/0", "0x0/10", "0/G", " ", "-1/0"]
)
def test_a_malformed_token_is_ignored(token: str) -> None:
    script = Script(recorded(header=token), recorded(extension=token), events_page())
    with client(script) as haki:
        record(haki)
        record(haki)
        haki.events("s")
        assert haki.consistency_token is None
    assert script.sent() == [None, None, None]


def test_a_token_of_another_type_in_the_extensions_is_ignored() -> None:
    script = Script(recorded(extension=12345), recorded(extension={"lsn": "0/1"}), events_page())
    with client(script) as haki:
        record(haki)
        record(haki)
        assert haki.consistency_token is None


def test_a_malformed_header_token_falls_back_to_the_extensions_one() -> None:
    script = Script(recorded(header="garbage", extension="0/30"))
    with client(script) as haki:
        record(haki)
        assert haki.consistency_token == "0/30"


def test_a_malformed_token_after_a_good_one_leaves_the_good_one() -> None:
    script = Script(recorded(header="0/30"), recorded(header="garbage"), events_page())
    with client(script) as haki:
        record(haki)
        record(haki)
        haki.events("s")
    assert script.sent() == [None, "0/30", "0/30"]


def test_execute_adopts_the_token_of_a_mutation_document() -> None:
    script = Script(
        answer({"recordEvent": {"id": "e1"}}, header="0/50"),
        answer({"events": EVENTS_PAGE["events"]}),
    )
    with client(script) as haki:
        haki.execute('# writes\nmutation { recordEvent(input: {subjectId: "s", kind: "k", payload: {}}) { id } }')
        assert haki.consistency_token == "0/50"
        haki.execute('{ events(subjectId: "s") { pageInfo { hasNextPage } } }')
    assert script.sent() == [None, "0/50"]


def test_execute_reads_the_operation_the_operation_name_selects() -> None:
    document = """
        query Read { stats { events } }
        mutation Write { recordEvent(input: {subjectId: "s", kind: "k", payload: {}}) { id } }
    """
    script = Script(
        answer({"stats": {"events": 1}}, header="0/60"), answer({"recordEvent": {"id": "e"}}, header="0/70")
    )
    with client(script) as haki:
        haki.execute(document, operation_name="Read")
        assert haki.consistency_token is None
        haki.execute(document, operation_name="Write")
        assert haki.consistency_token == "0/70"


def test_a_mutation_that_wrote_then_failed_still_adopts_its_token() -> None:
    # The first field was written and committed; the second was rolled back.
    body = {
        "data": {"a": {"id": "e1"}, "b": None},
        "errors": [{"message": "rolled back; retry it", "path": ["b"], "extensions": {"code": "UNAVAILABLE"}}],
    }
    script = Script(httpx.Response(200, json=body, headers={HEADER: "0/80"}), events_page())
    with client(script) as haki, pytest.raises(UnavailableError):
        haki.execute("mutation { a: recordEvent(input: {}) { id } b: recordEvent(input: {}) { id } }")
    assert haki.consistency_token == "0/80"


def test_a_retry_resends_the_token() -> None:
    unavailable = httpx.Response(
        503, json={"data": None, "errors": [{"message": "down", "extensions": {"code": "UNAVAILABLE"}}]}
    )
    script = Script(recorded(header="0/90"), unavailable, unavailable, events_page())
    with client(script) as haki:
        record(haki)
        haki.events("s")
    assert script.sent() == [None, "0/90", "0/90", "0/90"]


def test_the_export_request_sends_the_token() -> None:
    lines = [
        {"format": "haki-context/subject", "version": 1, "subjectId": "s", "exportedAt": "2026-08-01T10:00:00+00:00"},
        {"type": "end", "events": 0, "facts": 0, "conflicts": 0},
    ]
    export = httpx.Response(200, text="".join(json.dumps(line) + "\n" for line in lines))
    script = Script(recorded(header="0/A0"), export)
    with client(script) as haki:
        record(haki)
        assert list(haki.export_subject("s")) == lines
    assert script.requests[1].url.path == "/export"
    assert script.sent() == [None, "0/A0"]


def test_the_token_can_be_given_read_replaced_and_advanced() -> None:
    script = Script(events_page())
    with client(script, consistency_token=" 0/16B3748 ") as haki:
        assert haki.consistency_token == "0/16B3748"
        haki.events("s")
        haki.consistency_token = "0/10"  # replaces, even a higher one
        assert haki.consistency_token == "0/10"
        assert haki.advance_consistency_token("0/8") == "0/10"  # keeps the higher
        assert haki.advance_consistency_token("2/0") == "2/0"
        haki.events("s")
        haki.consistency_token = None  # forgets it
        haki.events("s")
        with pytest.raises(ValueError):
            haki.consistency_token = "garbage"
        with pytest.raises(ValueError):
            haki.advance_consistency_token("0/x")
        assert haki.consistency_token is None
    assert script.sent() == ["0/16B3748", "2/0", None]
    with pytest.raises(ValueError):
        client(script, consistency_token="not a token")


def test_concurrent_threads_keep_the_highest_token() -> None:
    def by_variable(request: httpx.Request) -> httpx.Response:
        position = int(json.loads(request.content)["variables"]["input"]["payload"]["n"])
        return recorded(header=f"{position >> 32:X}/{position & 0xFFFFFFFF:X}")

    positions = [(n * 7919) % 1000 + (n % 3 << 32) for n in range(200)]
    script = Script(by_variable)
    with client(script) as haki, ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(lambda n: haki.record_event("s", "note", {"n": n}), positions))
        top = max(positions)
        assert haki.consistency_token == f"{top >> 32:X}/{top & 0xFFFFFFFF:X}"


# ------------------------------------------------------------------------ the async client


async def test_the_async_client_sends_no_token_before_any_write_then_the_one_of_its_mutation() -> None:
    script = Script(events_page(), recorded(header="0/16B3748"), packet(header="0/16B3900"), events_page())
    async with HakiClient("http://haki.test", retry=NO_WAIT, transport=httpx.MockTransport(script)) as haki:
        await haki.events("s")
        assert haki.consistency_token is None
        await haki.record_event("s", "note", {})
        assert haki.consistency_token == "0/16B3748"
        await haki.context("s", "anything")  # a query's token is not adopted
        await haki.events("s")
        assert haki.consistency_token == "0/16B3748"
    assert script.sent() == [None, None, "0/16B3748", "0/16B3748"]


async def test_the_async_client_adopts_the_extensions_token_and_ignores_a_malformed_one() -> None:
    script = Script(recorded(extension="0/20"), recorded(header="0/2O"), events_page())
    async with HakiClient("http://haki.test", retry=NO_WAIT, transport=httpx.MockTransport(script)) as haki:
        await haki.record_event("s", "note", {})
        await haki.record_event("s", "note", {})
        await haki.events("s")
    assert script.sent() == [None, "0/20", "0/20"]


async def test_concurrent_async_calls_keep_the_highest_token() -> None:
    async def slow(request: httpx.Request) -> httpx.Response:
        position = int(json.loads(request.content)["variables"]["input"]["payload"]["n"])
        await asyncio.sleep((position % 5) / 1000)  # the answers come back out of order
        return recorded(header=f"0/{position:X}")

    positions = [(n * 7919) % 1000 for n in range(100)]
    async with HakiClient("http://haki.test", retry=NO_WAIT, transport=httpx.MockTransport(slow)) as haki:
        await asyncio.gather(*(haki.record_event("s", "note", {"n": n}) for n in positions))
        assert haki.consistency_token == f"0/{max(positions):X}"


async def test_the_async_client_resends_the_token_on_a_retry() -> None:
    unavailable = httpx.Response(503, text="down")
    script = Script(recorded(header="0/90"), unavailable, events_page())
    async with HakiClient("http://haki.test", retry=NO_WAIT, transport=httpx.MockTransport(script)) as haki:
        await haki.record_event("s", "note", {})
        await haki.events("s")
    assert script.sent() == [None, "0/90", "0/90"]


# ----------------------------------------------------------- which operation a request runs


@pytest.mark.parametrize(
    ("document", "operation_name", "mutation"),
    [
        ("mutation { a }", None, True),
        ("mutation M($x: In = {a: 1}) @d(b: 2) { a(x: $x) }", "M", True),
        ("mutation @d { a }", None, True),
        ("{ mutation }", None, False),
        ("query Q { mutation: a }", None, False),
        ("# mutation M { a }\nquery Q { a }", None, False),
        ('query Q { a(text: "mutation M { a }") }', None, False),
        ('query Q { a(text: """ \\""" mutation M { a } """) }', None, False),
        ("fragment F on Mutation { a } query Q { ...F }", None, False),
        ("query Q { ...F } fragment F on Mutation { a } mutation M { b }", "M", True),
        ("query Q { a } mutation M { b }", "Q", False),
        ("query Q { a } mutation M { b }", None, False),  # ambiguous: the server refuses it
        ("query Q { a } mutation M { b }", "Other", False),
        ("subscription S { a }", None, False),
    ],
)
def test_a_mutation_is_told_by_the_keyword_of_the_operation_the_request_selects(
    document: str, operation_name: str | None, mutation: bool
) -> None:
    assert is_mutation(document, operation_name) is mutation


def test_the_operations_of_a_document_are_read_in_order() -> None:
    document = 'query A { a } { b } mutation B($x: In = {s: "}"}) { c } subscription { d } fragment F on T { e }'
    assert document_operations(document) == [("query", "A"), ("query", None), ("mutation", "B"), ("subscription", None)]


def test_a_token_is_read_as_the_log_position_hi_lo() -> None:
    assert token_position("0/16B3748") == 0x16B3748
    assert token_position("1/0") == 1 << 32
    assert token_position("FFFFFFFF/FFFFFFFF") == (1 << 64) - 1
    assert token_position("0/fF") == 0xFF
    assert token_position("100000000/0") is None
    assert token_position(None) is None
