"""The texts the server derives from facts and events (docs/design.md "Texts").

A fact's text is what is searched, embedded, and shown in `rendered`. An
event becomes one or more episode chunks: a chunk's text is searched and
embedded, its excerpt is what a packet serves.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

from ..settings import ExcerptFormat

_TEXT_KEYS = ("text", "content", "message")
_SPEAKER_KEYS = ("speaker", "role", "author")
_CAPTION_KEYS = ("image_caption", "blip_caption", "caption")
# all-MiniLM-L6-v2 reads 256 word pieces; ~1,000 characters of English stay under that.
MAX_CHUNK_CHARS = 1000


def compact_json(value: Any) -> str:
    """JSON without spaces, non-ASCII kept as is."""
    return orjson.dumps(value).decode()


def fact_text(predicate: str, value: Any) -> str:
    """`"<predicate with _ as spaces>: <value>"`; objects and lists give `key value` pairs of their leaves."""
    return f"{predicate.replace('_', ' ')}: {_value_text(value)}"


def _value_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    parts: list[str] = []
    _leaves(value, None, parts)
    return " ".join(parts)


def _leaves(value: Any, key: str | None, out: list[str]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _leaves(v, str(k), out)
    elif isinstance(value, list):
        for v in value:
            _leaves(v, key, out)
    else:
        scalar = compact_json(value) if not isinstance(value, str) else value
        out.append(f"{key} {scalar}" if key is not None else scalar)


@dataclass(frozen=True)
class ChunkText:
    """One turn-sized piece of an event: its searchable text and its served excerpt.

    `is_turn` tells a conversational turn ("<speaker>: <text>") from a payload
    only known as JSON: a turn's text can be served as its own excerpt.
    """

    position: int
    text: str
    excerpt: str
    is_turn: bool = False
    speaker: str | None = None


def event_excerpt(kind: str, payload: Any, limit: int) -> str:
    """`"<kind> <compact JSON>"` cut to `limit` characters."""
    return f"{kind} {compact_json(payload)}"[:limit]


def turn_speaker(payload: Any) -> str | None:
    """Who spoke a turn (payload keys `speaker`, `role` or `author`), if said."""
    if not isinstance(payload, dict):
        return None
    return next((payload[k] for k in _SPEAKER_KEYS if isinstance(payload.get(k), str)), None)


def turn_text(payload: Any) -> str | None:
    """`"<speaker>: <text>"` of a conversational turn (plus an image caption), or None."""
    if not isinstance(payload, dict):
        return None
    body = next((payload[k] for k in _TEXT_KEYS if isinstance(payload.get(k), str)), None)
    if body is None:
        return None
    speaker = next((payload[k] for k in _SPEAKER_KEYS if isinstance(payload.get(k), str)), None)
    caption = next((payload[k] for k in _CAPTION_KEYS if isinstance(payload.get(k), str)), None)
    text = f"{speaker}: {body}" if speaker else body
    if caption:
        text = f"{text} [image: {caption}]"
    return text


def event_chunks(kind: str, payload: Any, excerpt_limit: int) -> list[ChunkText]:
    """The episode chunks of an event.

    A payload holding a `messages` list gives one chunk per message; a long
    single text is split on paragraph and sentence boundaries; anything else
    is one chunk whose text is the turn text or the compact JSON.
    """
    if isinstance(payload, dict) and isinstance(payload.get("messages"), list) and payload["messages"]:
        chunks: list[ChunkText] = []
        for message in payload["messages"]:
            text = turn_text(message) or compact_json(message)
            is_turn = turn_text(message) is not None
            speaker = turn_speaker(message)
            for piece in split_long_text(text):
                part = message if piece == text else {**_as_dict(message), "text": piece}
                excerpt = event_excerpt(kind, part, excerpt_limit)
                chunks.append(ChunkText(len(chunks), piece, excerpt, is_turn, speaker))
        return chunks
    turn = turn_text(payload)
    if turn is None:
        return [ChunkText(0, compact_json(payload)[: MAX_CHUNK_CHARS * 4], event_excerpt(kind, payload, excerpt_limit))]
    pieces = split_long_text(turn)
    speaker = turn_speaker(payload)
    if len(pieces) == 1:
        return [ChunkText(0, turn, event_excerpt(kind, payload, excerpt_limit), True, speaker)]
    return [
        ChunkText(i, piece, event_excerpt(kind, {**payload, "text": piece}, excerpt_limit), True, speaker)
        for i, piece in enumerate(pieces)
    ]


def _as_dict(message: Any) -> dict[str, Any]:
    return message if isinstance(message, dict) else {"text": message}


def served_excerpt(excerpt_format: ExcerptFormat, text: str, json_excerpt: str, is_turn: bool, limit: int) -> str:
    """What a packet serves for a chunk: JSON is `"<kind> <compact JSON>"` for every chunk (the
    classic profile's); TEXT serves a turn as its own words (`"<speaker>: <text>"`),
    cut to `limit`, and keeps the JSON form for payloads that are not turns."""
    if excerpt_format is ExcerptFormat.TEXT and is_turn:
        return text[:limit]
    return json_excerpt


_PARAGRAPH = re.compile(r"\n\s*\n")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def split_long_text(text: str, max_chars: int = MAX_CHUNK_CHARS) -> list[str]:
    """Split on paragraphs, then sentences, then words, into pieces of at most `max_chars`."""
    if len(text) <= max_chars:
        return [text]
    pieces: list[str] = []
    for paragraph in _PARAGRAPH.split(text):
        _pack_units(_SENTENCE.split(paragraph.strip()), max_chars, pieces)
    return [p for p in pieces if p]


def _pack_units(units: list[str], max_chars: int, out: list[str]) -> None:
    current = ""
    for unit in units:
        while len(unit) > max_chars:  # one sentence longer than a chunk: cut at a space
            cut = unit.rfind(" ", 0, max_chars)
            cut = cut if cut > 0 else max_chars
            if current:
                out.append(current)
                current = ""
            out.append(unit[:cut].strip())
            unit = unit[cut:].strip()
        if not current:
            current = unit
        elif len(current) + 1 + len(unit) <= max_chars:
            current = f"{current} {unit}"
        else:
            out.append(current)
            current = unit
    if current:
        out.append(current)
