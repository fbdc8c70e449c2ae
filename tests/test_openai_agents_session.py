"""HakiSession and context_instructions, the Python client's OpenAI Agents SDK adapter, against a
live server, with the SDK's own types and runner.

Every model here is the SDK's ScriptedModel (agents.testing): no network, no API key, tracing
off. A server is started with `haki-context serve` on a fresh database of the test PostgreSQL
(development mode, so every scope, `erase` included; the hashing embedder).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import httpx
import pytest

pytest.importorskip(
    "agents.memory",
    reason="The OpenAI Agents SDK is not installed: it comes with the `openai-agents` extra of "
    "haki-context-client (and with the root's `openai-agents` extra)",
)

import haki_context_client.openai_agents as adapter
from agents import Agent, RunContextWrapper, Runner, function_tool, set_tracing_disabled
from agents.items import TResponseInputItem
from agents.memory import Session, SessionSettings
from agents.testing import ScriptedModel, assistant_message, function_call
from browser_support import serve
from haki_context_client import HakiClient, RetryPolicy, UnauthenticatedError
from haki_context_client.openai_agents import (
    CLEAR_KIND,
    ITEM_KIND,
    MEMORY_HEADING,
    POP_KIND,
    HakiSession,
    context_instructions,
    latest_user_text,
)
from haki_context_client.types import ContextPacket, Event

ROOT = Path(__file__).resolve().parent.parent
AGENTS_DOC = ROOT / "docs" / "agents.md"
ADDRESS = "http://127.0.0.1:8000"

set_tracing_disabled(True)


@pytest.fixture(scope="module")
def server(migrated: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL of a `haki-context serve` on a database of its own."""
    with serve(migrated, tmp_path_factory) as served:
        yield served.base


@pytest.fixture
async def haki(server: str) -> AsyncIterator[HakiClient]:
    async with HakiClient(server) as client:
        yield client


@pytest.fixture
def session_id() -> str:
    return f"chat-{uuid.uuid4().hex[:12]}"


def user(text: str) -> TResponseInputItem:
    return cast(TResponseInputItem, {"role": "user", "content": text})


ITEMS: list[TResponseInputItem] = [
    user("Weather in Lisbon?"),
    cast(
        TResponseInputItem,
        {"type": "function_call", "name": "lookup", "arguments": '{"city":"Lisbon"}', "call_id": "c1", "id": "fc1"},
    ),
    cast(TResponseInputItem, {"type": "function_call_output", "call_id": "c1", "output": "sunny"}),
    cast(
        TResponseInputItem,
        {
            "type": "message",
            "role": "assistant",
            "id": "m1",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Sunny in Lisbon.", "annotations": []}],
        },
    ),
]


async def all_events(haki: HakiClient, subject_id: str) -> list[Event]:
    """Every event of the subject, oldest first."""
    found: list[Event] = []
    after: str | None = None
    while True:
        page = await haki.events(subject_id, first=100, after=after)
        found.extend(edge.node for edge in page.edges)
        if not page.page_info.has_next_page:
            return found[::-1]
        after = page.page_info.end_cursor


# -------------------------------------------------------------------------------- the items


async def test_a_haki_session_is_an_sdk_session(haki: HakiClient, session_id: str) -> None:
    session = HakiSession(session_id, client=haki)
    assert isinstance(session, Session)
    assert session.subject_id == session_id and session.session_settings == SessionSettings()
    other = HakiSession(session_id, client=haki, subject_id="somewhere-else")
    assert other.session_id == session_id and other.subject_id == "somewhere-else"


async def test_items_are_events_of_the_subject_in_order(haki: HakiClient, session_id: str) -> None:
    session = HakiSession(session_id, client=haki)
    assert await session.get_items() == []
    await session.add_items([])  # nothing to record: no call
    await session.add_items(ITEMS[:2])
    await session.add_items(ITEMS[2:])
    assert await session.get_items() == ITEMS
    assert await session.get_items(limit=2) == ITEMS[2:]
    assert await session.get_items(limit=0) == []
    assert await session.get_items(limit=-1) == []

    events = await all_events(haki, session_id)
    assert [e.kind for e in events] == [ITEM_KIND] * 4
    assert [e.payload for e in events] == ITEMS

    limited = HakiSession(session_id, client=haki, session_settings=SessionSettings(limit=1))
    assert await limited.get_items() == ITEMS[3:]
    assert await limited.get_items(limit=3) == ITEMS[1:]  # an explicit limit wins over the settings'


async def test_get_items_reads_past_the_first_page(haki: HakiClient, session_id: str) -> None:
    session = HakiSession(session_id, client=haki)
    items = [user(f"message {i}") for i in range(130)]
    await session.add_items(items)
    assert await session.get_items() == items
    assert await session.get_items(limit=105) == items[25:]


async def test_add_items_splits_at_the_servers_limit(
    haki: HakiClient, session_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(adapter, "MAX_EVENTS_PER_CALL", 2)
    session = HakiSession(session_id, client=haki)
    items = [user(f"message {i}") for i in range(5)]
    await session.add_items(items)
    assert await session.get_items() == items


async def test_events_of_other_kinds_are_not_items(haki: HakiClient, session_id: str) -> None:
    session = HakiSession(session_id, client=haki)
    await session.add_items(ITEMS[:1])
    await haki.remember(session_id, [{"speaker": "Ann", "text": "recorded by other code"}])
    await session.add_items(ITEMS[1:2])
    assert await session.get_items() == ITEMS[:2]


# ---------------------------------------------------------------------- popping and clearing


async def test_pop_item_records_a_tombstone_that_get_items_honours(haki: HakiClient, session_id: str) -> None:
    session = HakiSession(session_id, client=haki)
    assert await session.pop_item() is None
    await session.add_items(ITEMS[:3])
    assert await session.pop_item() == ITEMS[2]
    assert await session.get_items() == ITEMS[:2]

    events = await all_events(haki, session_id)
    assert [e.kind for e in events] == [ITEM_KIND, ITEM_KIND, ITEM_KIND, POP_KIND]
    assert events[3].payload == {"eventId": events[2].id}  # the popped item's event stays

    await session.add_items(ITEMS[3:])
    assert await session.pop_item() == ITEMS[3]
    assert await session.pop_item() == ITEMS[1]
    assert await session.pop_item() == ITEMS[0]
    assert await session.pop_item() is None
    assert await session.get_items() == []
    await session.add_items(ITEMS[:1])
    assert await session.get_items() == ITEMS[:1]


async def test_clear_session_records_a_marker(haki: HakiClient, session_id: str) -> None:
    session = HakiSession(session_id, client=haki)
    await session.add_items(ITEMS[:2])
    await session.clear_session()
    assert await session.get_items() == []
    assert await session.pop_item() is None
    await session.add_items(ITEMS[2:3])
    assert await session.get_items() == ITEMS[2:3]
    kinds = [e.kind for e in await all_events(haki, session_id)]
    assert kinds == [ITEM_KIND, ITEM_KIND, CLEAR_KIND, ITEM_KIND]  # the conversation stays, as its history


async def test_clear_session_can_forget_the_subject(haki: HakiClient, session_id: str) -> None:
    session = HakiSession(session_id, client=haki, forget_on_clear=True)
    await session.add_items(ITEMS)
    await haki.assert_fact(session_id, "invoice_language", "French")
    await session.clear_session()
    assert await all_events(haki, session_id) == []
    assert (await haki.facts(session_id)).edges == []  # everything about the subject went
    assert await session.get_items() == []
    await session.add_items(ITEMS[:1])
    assert await session.get_items() == ITEMS[:1]


async def test_a_session_made_from_a_url_closes_its_client(server: str, session_id: str) -> None:
    async with HakiSession(session_id, base_url=server) as session:
        await session.add_items(ITEMS[:1])
        assert await session.get_items() == ITEMS[:1]
    assert session.client._transport.http.is_closed  # the client it made, closed on leaving the block


# ------------------------------------------------------------------------------ the runner


def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


# Called, not used as a decorator: where the SDK is not installed mypy sees it as Any, and an
# untyped decorator would make the function untyped under --strict.
lookup = function_tool(weather, name_override="lookup")


async def test_runner_keeps_a_two_turn_conversation_here(haki: HakiClient, session_id: str) -> None:
    model = ScriptedModel(
        [
            [function_call("lookup", {"city": "Lisbon"}, call_id="c1")],
            [assistant_message("It is sunny in Lisbon.")],
            [assistant_message("You asked about the weather in Lisbon.")],
        ]
    )
    agent = Agent(name="Weather", instructions="Be brief.", model=model, tools=[lookup])
    first = await Runner.run(agent, "Weather in Lisbon?", session=HakiSession(session_id, client=haki))
    assert first.final_output == "It is sunny in Lisbon."

    # Another session object, the same id: the conversation comes from the memory.
    second = await Runner.run(agent, "What did I ask?", session=HakiSession(session_id, client=haki))
    assert second.final_output == "You asked about the weather in Lisbon."
    model.assert_complete()

    seen = cast(list[dict[str, Any]], model.calls[2].input)
    assert seen[0] == {"role": "user", "content": "Weather in Lisbon?"}
    assert [i.get("type") for i in seen[1:4]] == ["function_call", "function_call_output", "message"]
    assert seen[3]["content"][0]["text"] == "It is sunny in Lisbon."
    assert seen[-1] == {"role": "user", "content": "What did I ask?"}

    stored = await HakiSession(session_id, client=haki).get_items()
    assert stored[:-1] == [cast(TResponseInputItem, i) for i in seen]
    assert cast(dict[str, Any], stored[-1])["content"][0]["text"] == "You asked about the weather in Lisbon."
    assert {e.kind for e in await all_events(haki, session_id)} == {ITEM_KIND}


# --------------------------------------------------------------------- context each turn


async def test_context_instructions_put_the_packet_in_the_system_prompt(haki: HakiClient, session_id: str) -> None:
    subject = f"user-{uuid.uuid4().hex[:12]}"
    await haki.assert_fact(subject, "invoice_language", "French")
    packets: list[ContextPacket] = []
    instructions = context_instructions(haki, "Be brief.", subject_id=subject, on_packet=packets.append)
    model = ScriptedModel([[assistant_message("In French.")]])
    agent = Agent(name="Billing", instructions=instructions, model=model)
    question = "Which language should my invoices use?"
    await Runner.run(agent, question, session=HakiSession(session_id, client=haki))

    system = model.calls[0].system_instructions
    assert system is not None
    assert system.startswith(f"Be brief.\n\n{MEMORY_HEADING}\n") and "invoice language: French" in system
    assert len(packets) == 1 and system.endswith(packets[0].rendered)
    trace = await haki.trace(packets[0].trace_id)
    assert trace is not None and trace.subject_id == subject and trace.query == question


@dataclass
class Caller:
    user_id: str


async def test_context_instructions_name_the_subject_from_the_run_context(haki: HakiClient) -> None:
    subject = f"user-{uuid.uuid4().hex[:12]}"
    await haki.assert_fact(subject, "home_town", "Lisbon")
    instructions = context_instructions(haki, "Be brief.", subject_id=lambda wrapper: wrapper.context.user_id)
    model = ScriptedModel([[assistant_message("Lisbon.")]])
    agent = Agent[Caller](name="Home", instructions=instructions, model=model)
    await Runner.run(agent, "Where do I live?", context=Caller(subject))
    system = model.calls[0].system_instructions
    assert system is not None and "home town: Lisbon" in system


async def test_context_instructions_fall_back_to_the_instructions_alone(haki: HakiClient) -> None:
    agent = Agent(name="a")
    instructions = context_instructions(haki, "Be brief.", subject_id=f"nobody-{uuid.uuid4().hex[:8]}")
    wrapper = RunContextWrapper[None](context=None)
    assert await instructions(wrapper, agent) == "Be brief."  # the turn holds no user text
    wrapper.turn_input = [user("Anything about me?")]
    assert await instructions(wrapper, agent) == "Be brief."  # the packet is empty

    def unavailable(request: httpx.Request) -> httpx.Response:
        body = {"data": None, "errors": [{"message": "database unavailable", "extensions": {"code": "UNAVAILABLE"}}]}
        return httpx.Response(503, json=body)

    async with HakiClient(ADDRESS, transport=httpx.MockTransport(unavailable), retry=RetryPolicy(attempts=1)) as down:
        on_down = context_instructions(down, "Be brief.", subject_id="user-42")
        assert await on_down(wrapper, agent) == "Be brief."

    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    async with HakiClient(ADDRESS, transport=httpx.MockTransport(refused), retry=RetryPolicy(attempts=1)) as gone:
        on_gone = context_instructions(gone, "Be brief.", subject_id="user-42")
        assert await on_gone(wrapper, agent) == "Be brief."  # unreachable: the turn goes on without memory

    def refused_key(request: httpx.Request) -> httpx.Response:
        body = {"data": None, "errors": [{"message": "no key", "extensions": {"code": "UNAUTHENTICATED"}}]}
        return httpx.Response(401, json=body)

    async with HakiClient(ADDRESS, transport=httpx.MockTransport(refused_key)) as refusing:
        with pytest.raises(UnauthenticatedError):  # a misconfiguration is not hidden
            await context_instructions(refusing, "Be brief.", subject_id="user-42")(wrapper, agent)


def test_latest_user_text_reads_the_last_user_message() -> None:
    parts = {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}],
    }
    items = [
        user("first"),
        cast(TResponseInputItem, parts),
        cast(TResponseInputItem, {"type": "function_call_output", "call_id": "c", "output": "x"}),
        ITEMS[3],
    ]
    assert latest_user_text(items) == "a\nb"
    assert latest_user_text(items[:1]) == "first"
    assert latest_user_text([user("  "), *items[2:]]) is None
    assert latest_user_text([]) is None


# ----------------------------------------------------------------------------- the docs


def docs_example(name: str) -> str:
    """The fenced block after `<!-- example: name -->` in docs/agents.md (one only)."""
    pattern = re.compile(rf"<!-- example: {re.escape(name)} -->\s*\n```python\n(.*?)\n```", re.DOTALL)
    blocks = pattern.findall(AGENTS_DOC.read_text(encoding="utf-8"))
    assert len(blocks) == 1, f"docs/agents.md must mark one python block `example: {name}`"
    return str(blocks[0])


# The docs' snippet names an OpenAI model; the test gives it a scripted one instead, and then
# prints what that model was given.
SCRIPTED = """\
from agents import set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message

set_tracing_disabled(True)
SCRIPTED_MODEL = ScriptedModel([[assistant_message("In French.")], [assistant_message("Which language to use.")]])
"""
REPORT = """
import json
print("REPORT " + json.dumps([
    {"system": call.system_instructions, "inputs": len(call.input)} for call in SCRIPTED_MODEL.calls
]))
"""


def test_the_docs_snippet_runs_as_pasted(server: str, tmp_path: Path) -> None:
    code = docs_example("openai-agents")
    assert code.count(ADDRESS) == 1 and code.count('model="gpt-4.1-mini"') == 1
    script = tmp_path / "agents_session.py"
    script.write_text(
        SCRIPTED + code.replace(ADDRESS, server).replace('model="gpt-4.1-mini"', "model=SCRIPTED_MODEL") + REPORT,
        encoding="utf-8",
    )
    client_src = str(ROOT / "clients" / "python" / "src")
    env = {
        **{k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"},
        "PYTHONPATH": os.pathsep.join(filter(None, [client_src, os.environ.get("PYTHONPATH")])),
    }
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr + done.stdout
    lines = done.stdout.splitlines()
    assert "In French." in lines and "Which language to use." in lines, done.stdout
    assert "4 items in the session" in lines, done.stdout  # two turns: a message and a reply each
    assert len([line for line in lines if re.fullmatch(r"context trace: [0-9a-f-]{36}", line)]) == 2, done.stdout
    report = json.loads(next(line for line in lines if line.startswith("REPORT "))[len("REPORT ") :])
    assert "invoice language: French" in report[0]["system"]
    assert [call["inputs"] for call in report] == [1, 3]  # the second turn sees the first from the memory
