"""LoCoMo conversations as the quality harness sees them: turns, questions, events.

The turns are ingested, and in mode "f" each session's observations (never
the benchmark's summaries or event annotations, which a memory server would not have). A
turn's payload is `{speaker, text, dia_id}` plus `image_caption` (the turn's
`blip_caption`) when an image was shared.

Three ingestion modes:
- "a": one event per turn, `occurredAt` = the session date (as UTC) plus one
  second per turn of the session, so order is kept;
- "b": one event per session, `payload = {messages: [turn payload, ...]}`,
  `occurredAt` = the session date;
- "f": mode a's events, and each `session_N_observation` entry (a fact about a
  speaker written from the conversation, with the dia_id(s) of its evidence
  turns) asserted as a fact: predicate `observation.<session>.<i>` (one per
  observation, mode ADD, so none supersedes another), value its text,
  `sourceEventIds` its evidence turns' events, `validFrom` the session date.

`EventSpec.chunk_turns` maps each episode chunk position the server derives
from the payload back to the turn it came from (a message the server splits
into several chunks maps each piece to the same turn).
"""

from __future__ import annotations

import argparse
import json
import os
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from haki_context.core.texts import compact_json, split_long_text, turn_text

# The LoCoMo conversations are a dataset of their own, not shipped with the project: the harnesses
# and tests that need them read the folder of their *.json files from $LOCOMO_DIR (or --data).
DATA_ENV = "LOCOMO_DIR"
NEEDS_DATA = f"needs the LoCoMo conversations (their *.json files): set {DATA_ENV} to their folder"


def data_dir() -> Path | None:
    """The LoCoMo conversations' folder named by $LOCOMO_DIR; None when it is not set."""
    value = os.environ.get(DATA_ENV)
    return Path(value) if value else None


def add_data_argument(parser: argparse.ArgumentParser) -> None:
    """`--data`, the LoCoMo conversations' folder: $LOCOMO_DIR unless given, required when neither is."""
    default = data_dir()
    parser.add_argument(
        "--data",
        type=Path,
        default=default,
        required=default is None,
        help=f"folder of the LoCoMo conversations (*.json); default ${DATA_ENV}",
    )


CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
KIND_TURN = "conversation.message"
KIND_SESSION = "conversation.session"
MODES = ("a", "b", "f")
FACT_MODES = frozenset({"f"})  # the modes that assert observations as facts

_SESSION_KEY = re.compile(r"session_(\d+)")
_EVIDENCE_SPLIT = re.compile(r"[;,\s]+")
_DATE_FORMATS = ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%H:%M on %d %B, %Y")


@dataclass(frozen=True)
class Turn:
    dia_id: str
    session: int
    index: int  # position within its session
    payload: dict[str, Any]
    occurred_at: datetime  # session date + index seconds

    @property
    def text(self) -> str:
        """The chunk text the server searches and embeds (docs/design.md "Texts")."""
        return turn_text(self.payload) or compact_json(self.payload)


@dataclass(frozen=True)
class Question:
    conversation: str
    index: int  # position in the file's `qa` list
    question: str
    category: int
    evidence: tuple[str, ...]  # valid dia_ids only, in order, no duplicates


@dataclass(frozen=True)
class Observation:
    """One `session_N_observation` entry: a fact about a speaker, with its evidence turns."""

    session: int
    index: int  # position within its session's observations, all speakers in file order
    speaker: str
    text: str
    evidence: tuple[str, ...]  # valid dia_ids only
    valid_from: datetime  # the session date

    @property
    def predicate(self) -> str:
        return f"observation.{self.session}.{self.index}"


@dataclass
class Conversation:
    id: str  # the file stem, e.g. "26"
    speakers: tuple[str, str]
    turns: list[Turn]
    sessions: dict[int, datetime]
    questions: list[Question]
    invalid_evidence: list[str] = field(default_factory=list)  # ids that name no turn
    dropped_questions: int = 0  # categories 1-4 left with no valid evidence
    observations: list[Observation] = field(default_factory=list)

    @property
    def turn_ids(self) -> set[str]:
        return {t.dia_id for t in self.turns}


@dataclass(frozen=True)
class EventSpec:
    """One event to record, and the turn behind each of its chunks."""

    kind: str
    payload: dict[str, Any]
    occurred_at: datetime
    chunk_turns: tuple[str, ...]  # dia_id of chunk 0, 1, ...

    @property
    def turns(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.chunk_turns))


def parse_session_date(text: str) -> datetime:
    """ "1:56 pm on 8 May, 2023" as UTC."""
    cleaned = " ".join(text.split())
    for fmt in _DATE_FORMATS:
        try:
            return datetime.strptime(cleaned, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    raise ValueError(f"unrecognised session date {text!r}")


def split_evidence(values: Any) -> list[str]:
    """Evidence ids, split on `;`, `,` and spaces (some strings hold several)."""
    if isinstance(values, str):
        values = [values]
    out: list[str] = []
    for value in values or []:
        out.extend(p for p in _EVIDENCE_SPLIT.split(str(value)) if p)
    return out


def turn_payload(raw: dict[str, Any]) -> dict[str, Any]:
    payload: dict[str, Any] = {"speaker": raw["speaker"], "text": raw.get("text") or "", "dia_id": raw["dia_id"]}
    caption = raw.get("blip_caption")
    if isinstance(caption, str) and caption.strip():
        payload["image_caption"] = caption
    return payload


def load_conversation(path: Path, categories: tuple[int, ...] = tuple(CATEGORIES)) -> Conversation:
    data = json.loads(path.read_text())
    if "conversation" in data and isinstance(data["conversation"], dict):  # the locomo10.json layout
        qa = data.get("qa", [])
        data = {**data["conversation"], "qa": qa}
    sessions: dict[int, datetime] = {}
    turns: list[Turn] = []
    numbers = sorted(int(m.group(1)) for k in data if (m := _SESSION_KEY.fullmatch(k)) and isinstance(data[k], list))
    for n in numbers:
        date = parse_session_date(data[f"session_{n}_date_time"])
        sessions[n] = date
        for i, raw in enumerate(data[f"session_{n}"]):
            turns.append(Turn(raw["dia_id"], n, i, turn_payload(raw), date + timedelta(seconds=i)))
    conv = Conversation(path.stem, (data["speaker_a"], data["speaker_b"]), turns, sessions, [])
    known = conv.turn_ids
    for n in numbers:
        by_speaker = data.get(f"session_{n}_observation") or {}
        index = 0
        for speaker, entries in by_speaker.items():
            for entry in entries:
                text = str(entry[0]).strip() if entry else ""
                raw = entry[1] if len(entry) > 1 else []
                evidence = tuple(dict.fromkeys(e for e in split_evidence(raw) if e in known))
                if text:
                    conv.observations.append(Observation(n, index, str(speaker), text, evidence, sessions[n]))
                    index += 1
    for qi, q in enumerate(data.get("qa", [])):
        category = int(q.get("category", 0))
        if category not in categories:
            continue
        valid: list[str] = []
        for ev in split_evidence(q.get("evidence")):
            if ev in known:
                if ev not in valid:
                    valid.append(ev)
            else:
                conv.invalid_evidence.append(ev)
        if not valid:
            conv.dropped_questions += 1
            continue
        conv.questions.append(Question(conv.id, qi, str(q["question"]), category, tuple(valid)))
    return conv


def load_conversations(data_dir: Path, ids: list[str] | None = None) -> list[Conversation]:
    paths = sorted(data_dir.glob("*.json"), key=lambda p: (len(p.stem), p.stem))
    if ids:
        wanted = set(ids)
        paths = [p for p in paths if p.stem in wanted]
        missing = wanted - {p.stem for p in paths}
        if missing:
            raise FileNotFoundError(f"no conversation {sorted(missing)} under {data_dir}")
    if not paths:
        raise FileNotFoundError(f"no LoCoMo conversation (*.json) under {data_dir}")
    return [load_conversation(p) for p in paths]


def _pieces(message: dict[str, Any]) -> int:
    """How many chunks the server derives from one message (core/texts.py event_chunks)."""
    return len(split_long_text(turn_text(message) or compact_json(message)))


def events(conv: Conversation, mode: str) -> list[EventSpec]:
    """The events of one conversation in ingestion mode "a" (per turn) or "b" (per session)."""
    if mode in ("a", "f"):
        return [EventSpec(KIND_TURN, t.payload, t.occurred_at, (t.dia_id,) * _pieces(t.payload)) for t in conv.turns]
    if mode == "b":
        out = []
        for n, date in conv.sessions.items():
            session = [t for t in conv.turns if t.session == n]
            if not session:
                continue
            chunk_turns: list[str] = []
            for t in session:
                chunk_turns.extend([t.dia_id] * _pieces(t.payload))
            out.append(EventSpec(KIND_SESSION, {"messages": [t.payload for t in session]}, date, tuple(chunk_turns)))
        return out
    raise ValueError(f"unknown ingestion mode {mode!r} (use 'a', 'b' or 'f')")
