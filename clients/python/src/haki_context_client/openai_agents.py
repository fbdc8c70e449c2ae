"""OpenAI Agents SDK sessions on haki-context: `HakiSession`, and `context_instructions` to put
the memory's context in an agent's instructions each turn.

    from agents import Agent, Runner
    from haki_context_client import HakiClient
    from haki_context_client.openai_agents import HakiSession, context_instructions

    haki = HakiClient("http://127.0.0.1:8000", api_key="hk_...")
    agent = Agent(name="Assistant", instructions=context_instructions(haki, "Be brief.", subject_id="user-42"))
    result = await Runner.run(agent, "Hello", session=HakiSession("user-42/chat-1", client=haki))

Needs the `openai-agents` extra: `pip install 'haki-context-client[openai-agents]'`.

A session is a subject (its id is the session id, unless `subject_id` names another): each item
the runner adds is one event of kind `openai_agents.item` whose payload is the item itself, so
the conversation is recorded where `context` can serve its turns as episodes. Events are
append-only and cannot be deleted one by one, so:

- `pop_item` records a tombstone, an event of kind `openai_agents.pop` with payload
  `{"eventId": <the popped item's event id>}`; `get_items` leaves popped items out. The popped
  item's event stays in the memory (`events`, exports, and `context` may still serve it).
- `clear_session` records a marker, an event of kind `openai_agents.clear`; `get_items` returns
  only the items added after the last one. With `forget_on_clear=True` it calls `forgetSubject`
  instead: everything the project holds about the subject is deleted (events, facts, traces),
  which needs a key with the `erase` scope: only for a subject that is the session's alone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import Any, Self, cast

try:
    from agents import Agent, RunContextWrapper
    from agents.items import TResponseInputItem
    from agents.memory import SessionSettings
    from agents.memory.session_settings import resolve_session_limit
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "haki_context_client.openai_agents needs the OpenAI Agents SDK: "
        "pip install 'haki-context-client[openai-agents]'"
    ) from exc

from .client import DEFAULT_URL, HakiClient
from .errors import StatementTimeoutError, TransportError, UnavailableError
from .types import ContextPacket, EventInput

__all__ = [
    "CLEAR_KIND",
    "ITEM_KIND",
    "MEMORY_HEADING",
    "POP_KIND",
    "HakiSession",
    "context_instructions",
    "latest_user_text",
]

ITEM_KIND = "openai_agents.item"
"""The kind of the event that holds one session item (its payload is the item)."""
POP_KIND = "openai_agents.pop"
"""The kind of the tombstone `pop_item` records: payload `{"eventId": <the popped item's event>}`."""
CLEAR_KIND = "openai_agents.clear"
"""The kind of the marker `clear_session` records: items before the last one are left out."""
PAGE_SIZE = 100
"""Events per `events` request: the server's largest page."""
MAX_EVENTS_PER_CALL = 1000
"""Events per `recordEvents` call: the server's limit."""
MAX_QUERY_CHARS = 4000
"""The longest `context` query the server takes."""
log = logging.getLogger(__name__)

MEMORY_HEADING = "What memory holds that bears on this message (facts and earlier exchanges, dated):"
"""The line `context_instructions` puts between the instructions and the packet's text."""


class HakiSession:
    """A session of the OpenAI Agents SDK (the `agents.memory.Session` protocol) kept as events of
    one haki-context subject.

    ``Runner.run(agent, message, session=HakiSession("user-42/chat-1", client=haki))`` reads the
    conversation from the memory before the run and records the run's new items after it.

    `client` is an asyncio `HakiClient` (not closed here); without one the session makes its own
    from `base_url` and `api_key` (closed by `aclose`). `subject_id` is the subject whose events
    hold the items (default: `session_id`; 1..128 characters). `session_settings.limit` is the
    default number of items `get_items` returns (None: all). See the module's docstring for how
    `pop_item` and `clear_session` work (`forget_on_clear`).

    Within one process a session's writes are serialised; two processes popping the same
    session at once may both pop the same item (it is returned twice, recorded popped once).
    Items are ordered by the instant the server records them at, so the servers behind one URL
    must share a clock (as hosts kept by NTP do). A pop whose answer is lost (a `TransportError`
    after the server recorded its tombstone) has popped its item all the same.
    Use it as `async with HakiSession(...) as session:` to close a client it made.
    """

    session_settings: SessionSettings | None = None

    def __init__(
        self,
        session_id: str,
        *,
        client: HakiClient | None = None,
        base_url: str = DEFAULT_URL,
        api_key: str | None = None,
        subject_id: str | None = None,
        session_settings: SessionSettings | None = None,
        forget_on_clear: bool = False,
    ) -> None:
        self.session_id = session_id
        self.subject_id = subject_id if subject_id is not None else session_id
        self.session_settings = session_settings if session_settings is not None else SessionSettings()
        self.forget_on_clear = forget_on_clear
        self.client = client if client is not None else HakiClient(base_url, api_key=api_key)
        self._owns_client = client is None
        self._writing = asyncio.Lock()

    async def aclose(self) -> None:
        """Close the client this session made (a client given to it is left open)."""
        if self._owns_client:
            await self.client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items in the order they were added: the latest `limit` of them (default
        `session_settings.limit`; None: all; 0 or less: none), popped and cleared ones left out."""
        resolved = resolve_session_limit(limit, self.session_settings)
        if resolved is not None and resolved <= 0:
            return []
        newest_first = await self._live(resolved)
        return [item for _, item in reversed(newest_first)]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Record each item as an event of kind `openai_agents.item`, in order; all or nothing per
        1,000 items (the server's limit per call). Each must be JSON, at most 256 KiB."""
        if not items:
            return
        inputs = [EventInput(subjectId=self.subject_id, kind=ITEM_KIND, payload=item) for item in items]
        async with self._writing:
            for start in range(0, len(inputs), MAX_EVENTS_PER_CALL):
                await self.client.record_events(inputs[start : start + MAX_EVENTS_PER_CALL])

    async def pop_item(self) -> TResponseInputItem | None:
        """Take the latest item out of the session and return it (None when it holds none): a
        tombstone event names it, and `get_items` leaves it out from then on."""
        async with self._writing:
            latest = await self._live(1)
            if not latest:
                return None
            event_id, item = latest[0]
            await self.client.record_event(self.subject_id, POP_KIND, {"eventId": event_id})
            return item

    async def clear_session(self) -> None:
        """Leave every item recorded so far out of the session: a marker event, or with
        `forget_on_clear` the subject forgotten (`forgetSubject`, erase scope)."""
        async with self._writing:
            if self.forget_on_clear:
                await self.client.forget_subject(self.subject_id)
            else:
                await self.client.record_event(self.subject_id, CLEAR_KIND, {})

    async def _live(self, limit: int | None) -> list[tuple[str, TResponseInputItem]]:
        """The latest `limit` items still in the session (all with None), newest first, with
        their event ids. Events come newest first, so a tombstone is read before the item it
        names and the last clear marker ends the reading."""
        found: list[tuple[str, TResponseInputItem]] = []
        popped: set[str] = set()
        after: str | None = None
        while True:
            page = await self.client.events(self.subject_id, first=PAGE_SIZE, after=after)
            for edge in page.edges:
                event = edge.node
                if event.kind == CLEAR_KIND:
                    return found
                if event.kind == POP_KIND and isinstance(event.payload, dict):
                    popped.add(str(event.payload.get("eventId")))
                elif event.kind == ITEM_KIND and event.id not in popped:
                    found.append((event.id, cast(TResponseInputItem, event.payload)))
                    if limit is not None and len(found) >= limit:
                        return found
                # Events of other kinds (recorded by other code in the same subject) are not items.
            if not page.page_info.has_next_page:
                return found
            after = page.page_info.end_cursor


def latest_user_text(items: Sequence[TResponseInputItem]) -> str | None:
    """The text of the last user message among `items` (a plain string content, or the
    `input_text` parts of a content list, joined); None when there is none."""
    for item in reversed(items):
        entry = cast(dict[str, Any], item)
        if entry.get("role") != "user" or entry.get("type", "message") != "message":
            continue
        content = entry.get("content")
        if isinstance(content, str):
            text = content
        elif isinstance(content, list):
            text = "\n".join(
                str(part.get("text", ""))
                for part in content
                if isinstance(part, dict) and part.get("type") == "input_text"
            )
        else:
            continue
        if text.strip():
            return text
    return None


def context_instructions(
    client: HakiClient,
    instructions: str,
    *,
    subject_id: str | Callable[[RunContextWrapper[Any]], str],
    budget: int | None = None,
    on_packet: Callable[[ContextPacket], None] | None = None,
) -> Callable[[RunContextWrapper[Any], Agent[Any]], Awaitable[str]]:
    """Dynamic instructions for an `Agent`: before each model call, `context(subject, <the
    latest user message>, budget)` and the instructions followed by `MEMORY_HEADING` and the
    packet's `rendered` text (the instructions alone when the packet is empty, when the turn
    holds no user text, or when the server stays UNAVAILABLE after the client's retries, times
    out or cannot be reached: logged as a warning).

    `subject_id` is a subject, or a function of the run's context wrapper that names it (one
    agent for every user: ``subject_id=lambda wrapper: wrapper.context.user_id``). `on_packet`
    is called with each packet, e.g. to log `packet.trace_id` beside the model call."""

    async def dynamic_instructions(wrapper: RunContextWrapper[Any], agent: Agent[Any]) -> str:
        message = latest_user_text(wrapper.turn_input)
        if message is None:
            return instructions
        subject = subject_id(wrapper) if callable(subject_id) else subject_id
        try:
            packet = await client.context(subject, message[:MAX_QUERY_CHARS], budget=budget)
        except (UnavailableError, StatementTimeoutError, TransportError) as exc:
            # The memory is down, unreachable or slow (UNAVAILABLE was retried with backoff
            # first): the turn goes on without it. A key or an input refused still fails the run.
            log.warning("context for %s failed (%s): the turn goes on without memory", subject, exc.code)
            return instructions
        if on_packet is not None:
            on_packet(packet)
        if not packet.rendered:
            return instructions
        return f"{instructions}\n\n{MEMORY_HEADING}\n{packet.rendered}"

    return dynamic_instructions
