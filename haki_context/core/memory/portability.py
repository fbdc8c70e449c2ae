"""A subject's memory as JSON lines: export it, import it into another project or server.

The format (docs/design.md "Export format"), one JSON object per line:

    {"format": "haki-context/subject", "version": 1, "subjectId": ..., "exportedAt": ...}
    {"type": "event", "id", "kind", "payload", "occurredAt", "recordedAt"}        events, oldest first
    {"type": "fact", "id", "predicate", "value", "confidence", "status", "volatility", "validFrom",
     "validTo", "recordedAt", "lastReinforcedAt", "sourceEventIds", "supersededBy", "version",
     "openConflictId", "retractReason"}                                           facts, oldest first
    {"type": "conflict", "id", "status", "reason", "factIds", "createdAt", "resolvedAt", "keptFactId"}
    {"type": "end", "events": n, "facts": n, "conflicts": n}

The last line says how many records came before it: an export cut short (a connection lost
half way) has none, and an import refuses it. Derived data is not exported (excerpts, chunks,
embeddings, fact texts, search vectors, traces): the importing server derives it again with
its own embedder and settings.

Import restores the state the file describes, not the history that led to it: facts keep
their status, validity, dates, version, supersession and retraction reason, conflict sets
their status and members, because replaying the writes would date everything at the time of
the import (recency and the volatility horizons read those dates, so the packets would
differ). Every record passes the input rules of the write path (core/limits.py) and is
embedded on the way in. Ids are new (a mapping keeps sourceEventIds, supersededBy and conflict
members pointing at the new rows): the same file can then be imported twice, into the same
project under another subject too, without a clash, and an import never takes an id another
subject holds. They are made in the file's order (`_NewIds`), so ties the packet breaks by id
keep their order. The whole import is one transaction, under the target subject's erase lock,
into a subject that holds nothing yet.
"""

from __future__ import annotations

import contextlib
import secrets
import uuid
from collections.abc import AsyncGenerator, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import asyncpg
import orjson

from ...db import events as db_events
from ...db import portability as db_portability
from ...db import scope_indexes as db_scope_indexes
from ...db import subject_locks
from ...db.pool import without_statement_timeout
from ...db.scope_indexes import ScopeRows
from ..errors import InvalidInput
from ..limits import (
    MAX_KIND_CHARS,
    MAX_PAYLOAD_BYTES,
    MAX_PREDICATE_CHARS,
    MIN_CONFLICT_FACTS,
    check_aware,
    check_confidence,
    check_json_value,
    check_optional_reason,
    check_subject_id,
    check_text,
    check_validity,
    parse_id,
)
from ..models import ConflictStatus, FactEndReason, FactStatus, Volatility
from ..serving.auth import Caller, Scope
from ..serving.replicas import Reads
from ..serving.runtime import Runtime
from ..texts import event_chunks, event_excerpt, fact_text
from .facts import value_hash

FORMAT = "haki-context/subject"
VERSION = 1
MEDIA_TYPE = "application/x-ndjson"

# Records embedded and written per round of an import.
IMPORT_BATCH = 256
# The most dates one list of a record may hold (a fact's reinforcements, a set's join instants):
# a bound on the work one line can ask for, far above what a real memory holds.
MAX_HISTORY_DATES = 100_000


def _line(record: dict[str, Any]) -> bytes:
    return orjson.dumps(record) + b"\n"


def _id(value: Any) -> str | None:
    return None if value is None else str(value)


async def export_lines(
    reads: Reads, caller: Caller, subject_id: str, *, idle_timeout_s: float | None = None
) -> AsyncGenerator[bytes, None]:
    """The subject's memory as JSON lines, read from one snapshot through cursors; FORBIDDEN
    without `read`. Another project's subject (or an unknown one) exports as empty.

    The header line comes once the snapshot is open, so a failure to reach the database is
    raised before anything was sent. `idle_timeout_s`: see db/portability.py, begin_snapshot."""
    caller.require(Scope.READ)
    check_subject_id(subject_id)
    project_id = caller.project_id
    async with reads.connection() as conn, without_statement_timeout(conn):  # the snapshot runs to its end
        tx = await db_portability.begin_snapshot(conn, idle_timeout_s)
        try:
            header = {"format": FORMAT, "version": VERSION, "subjectId": subject_id, "exportedAt": datetime.now(UTC)}
            yield _line(header)
            counts = {"events": 0, "facts": 0, "conflicts": 0}
            async for row in db_portability.events(conn, project_id, subject_id):
                counts["events"] += 1
                yield _line(
                    {
                        "type": "event",
                        "id": str(row["id"]),
                        "kind": row["kind"],
                        "payload": row["payload"],
                        "occurredAt": row["occurred_at"],
                        "recordedAt": row["recorded_at"],
                    }
                )
            async for row in db_portability.facts(conn, project_id, subject_id):
                counts["facts"] += 1
                yield _line(
                    {
                        "type": "fact",
                        "id": str(row["id"]),
                        "predicate": row["predicate"],
                        "value": row["value"],
                        "confidence": row["confidence"],
                        "status": row["status"],
                        "volatility": row["volatility"],
                        "validFrom": row["valid_from"],
                        "validTo": row["valid_to"],
                        "recordedAt": row["recorded_at"],
                        "lastReinforcedAt": row["last_reinforced_at"],
                        "sourceEventIds": [str(i) for i in row["source_event_ids"]],
                        "supersededBy": _id(row["superseded_by"]),
                        "version": row["version"],
                        "openConflictId": _id(row["open_conflict_id"]),
                        "retractReason": row["retract_reason"],
                        "endedAt": row["ended_at"],
                        "endReason": row["end_reason"],
                        "activeValidTo": row["active_valid_to"],
                        "reinforcedAt": list(row["reinforced_at"]),
                    }
                )
            async for row in db_portability.conflicts(conn, project_id, subject_id):
                counts["conflicts"] += 1
                yield _line(
                    {
                        "type": "conflict",
                        "id": str(row["id"]),
                        "status": row["status"],
                        "reason": row["reason"],
                        "factIds": [str(i) for i in row["fact_ids"]],
                        "createdAt": row["created_at"],
                        "resolvedAt": row["resolved_at"],
                        "keptFactId": _id(row["kept_fact_id"]),
                        "membersAddedAt": list(row["members_added_at"]),
                    }
                )
            yield _line({"type": "end", **counts})
        finally:
            # Read only: nothing to keep. A session the database ended (idle too long) is gone already.
            with contextlib.suppress(asyncpg.PostgresError, asyncpg.InterfaceError, OSError):
                await tx.rollback()


@dataclass(frozen=True)
class ImportCounts:
    """What an import wrote."""

    subject_id: str
    events: int
    facts: int
    conflict_sets: int


async def import_lines(
    rt: Runtime, caller: Caller, lines: Iterable[bytes], subject_id: str | None = None
) -> ImportCounts:
    """Load an export into `caller`'s project, under `subject_id` (default: the exported one),
    in one transaction; FORBIDDEN without `write`, INVALID_INPUT (with the line number) for a
    record that breaks the format or an input rule, for a file cut short, and for a target
    subject that already holds memory."""
    caller.require(Scope.WRITE)
    reader = _Reader(iter(lines))
    header = reader.header()
    target = check_subject_id(subject_id if subject_id is not None else header, "subject")
    project_id = caller.project_id
    loader = _Loader(rt, project_id, target)
    # No statement timeout below, on the server nor here: a large file's batches may outlast it.
    async with rt.pool.acquire() as conn, without_statement_timeout(conn), conn.transaction():
        await subject_locks.own(conn, project_id, target)
        if await db_portability.holds_memory(conn, project_id, target):
            raise InvalidInput(
                f"subject {target!r} already holds memory in this project: import under another subject "
                "(--subject) or forget it first",
                field="subject",
            )
        try:
            for number, record in reader.records():
                await loader.add(conn, number, record)
            await loader.finish(conn, reader.trailer)
        except asyncpg.UniqueViolationError as exc:  # two ACTIVE facts of one value, in a file made by hand
            raise InvalidInput(
                "the file holds two ACTIVE facts with the same predicate and value", field="file"
            ) from exc
    rt.scope_growth.saw(loader.grown, rt.settings)
    return ImportCounts(target, loader.n_events, loader.n_facts, loader.n_conflicts)


_SECTIONS = {"event": 0, "fact": 1, "conflict": 2, "end": 3}


class _Reader:
    """The file's lines as records, the header and trailer checked."""

    def __init__(self, lines: Iterable[bytes]) -> None:
        self._lines = enumerate(lines, start=1)
        self.trailer: dict[str, Any] | None = None

    def _next(self) -> tuple[int, dict[str, Any]] | None:
        for number, raw in self._lines:
            if not raw.strip():
                continue
            try:
                record = orjson.loads(raw)
            except orjson.JSONDecodeError:
                raise InvalidInput(f"line {number}: not a JSON object", field="file") from None
            if not isinstance(record, dict):
                raise InvalidInput(f"line {number}: not a JSON object", field="file")
            return number, record
        return None

    def header(self) -> str:
        """The exported subject's id, once the header says the format and version are ours."""
        first = self._next()
        if first is None:
            raise InvalidInput("the file is empty", field="file")
        number, record = first
        if record.get("format") != FORMAT:
            raise InvalidInput(f"line {number}: not a haki-context subject export (no {FORMAT!r} header)", field="file")
        if record.get("version") != VERSION:
            raise InvalidInput(
                f"line {number}: export format version {record.get('version')!r}; this server reads {VERSION}",
                field="file",
            )
        subject = record.get("subjectId")
        if not isinstance(subject, str):
            raise InvalidInput(f"line {number}: the header names no subjectId", field="file")
        return subject

    def records(self) -> Iterable[tuple[int, dict[str, Any]]]:
        """(line number, record) of each event, fact and conflict, in the format's order; stops at
        the trailer, which is kept in `trailer` (None when the file ends without one)."""
        section = 0
        while (item := self._next()) is not None:
            number, record = item
            kind = record.get("type")
            if kind not in _SECTIONS:
                raise InvalidInput(f"line {number}: unknown record type {kind!r}", field="file")
            if _SECTIONS[kind] < section:
                raise InvalidInput(f"line {number}: a {kind} after the {_section_name(section)}s", field="file")
            section = _SECTIONS[kind]
            if kind == "end":
                self.trailer = record
                if self._next() is not None:
                    raise InvalidInput(f"line {number}: records after the last line", field="file")
                return
            yield number, record


def _section_name(section: int) -> str:
    return next(name for name, n in _SECTIONS.items() if n == section)


class _NewIds:
    """Fresh ids that sort in the order they are made: 64 random bits shared by one import (a
    UUID of version 8, the layout left to its maker), then a counter.

    Records come in the export's order, which sorts records of equal dates by id (one batch of
    events shares its dates), and ties of the packet break by id: made in that order, the new
    ids keep those ties as they were."""

    def __init__(self) -> None:
        high = secrets.randbits(64)
        self._high = (high & ~(0xF << 12)) | (0x8 << 12)  # version 8
        self._count = 0

    def next(self) -> str:
        self._count += 1
        return str(uuid.UUID(int=(self._high << 64) | (0b10 << 62) | self._count))  # RFC 4122 variant


@dataclass
class _Ids:
    """Old id -> new id of one kind of record, for the records the file has defined so far."""

    maker: _NewIds
    new: dict[str, str] = field(default_factory=dict)

    def define(self, old: str, number: int, kind: str) -> str:
        if old in self.new:
            raise InvalidInput(f"line {number}: the {kind} id {old} appears twice", field="id")
        self.new[old] = made = self.maker.next()
        return made


class _Loader:
    """Validates records one by one and writes them in batches, re-embedded."""

    def __init__(self, rt: Runtime, project_id: str, subject_id: str) -> None:
        self._rt = rt
        self._project = project_id
        self._subject = subject_id
        maker = _NewIds()
        self._events = _Ids(maker)
        self._facts = _Ids(maker)
        self._conflicts = _Ids(maker)
        self._pending_events: list[db_events.NewEvent] = []
        self._pending_chunks: list[db_events.NewChunk] = []
        self._pending_facts: list[db_portability.RestoredFact] = []
        # Links to records further down the file, set once every record is in: (line, the fact's
        # new id, the old id it points to).
        self._superseded_by: list[tuple[int, str, str]] = []
        self._open_conflict: list[tuple[int, str, str]] = []
        self._undated: list[str] = []  # superseded facts of a file that kept no history: dated at the end
        # Checked at the end too: the OPEN sets' members and the facts that say they are in one.
        self._open_member_of: dict[str, tuple[int, str]] = {}  # old fact id -> (line, old conflict id)
        self._open_sets: dict[str, set[str]] = {}  # old conflict id -> its old fact ids, for OPEN sets
        self.n_events = self.n_facts = self.n_conflicts = 0
        self.grown: list[ScopeRows] = []  # the scopes' counts the import added to, told once it committed

    async def add(self, conn: asyncpg.Connection, number: int, record: dict[str, Any]) -> None:
        kind = record["type"]
        try:
            if kind == "event":
                self._event(number, record)
            elif kind == "fact":
                await self._flush_events(conn)
                self._fact(number, record)
            else:
                await self._flush_events(conn)
                await self._flush_facts(conn)
                await self._conflict(conn, number, record)
        except InvalidInput as exc:
            if exc.message.startswith("line "):
                raise
            raise InvalidInput(f"line {number}: {exc.message}", field=exc.field) from exc
        if len(self._pending_events) >= IMPORT_BATCH:
            await self._flush_events(conn)
        if len(self._pending_facts) >= IMPORT_BATCH:
            await self._flush_facts(conn)

    def _event(self, number: int, r: dict[str, Any]) -> None:
        old = parse_id(_get(r, "id", str), "id")
        kind = check_text("kind", _get(r, "kind", str), MAX_KIND_CHARS)
        payload = _present(r, "payload")
        check_json_value("payload", payload, MAX_PAYLOAD_BYTES)
        occurred_at = _date(r, "occurredAt", required=True)
        recorded_at = _date(r, "recordedAt", required=True)
        assert occurred_at is not None and recorded_at is not None
        event_id = self._events.define(old, number, "event")
        limit = self._rt.settings.episode_excerpt_chars
        self._pending_events.append(
            db_events.NewEvent(
                event_id, self._subject, kind, payload, occurred_at, recorded_at, event_excerpt(kind, payload, limit)
            )
        )
        for chunk in event_chunks(kind, payload, limit):
            self._pending_chunks.append(
                db_events.NewChunk(
                    event_id=event_id,
                    position=chunk.position,
                    subject_id=self._subject,
                    kind=kind,
                    occurred_at=occurred_at,
                    text=chunk.text,
                    excerpt=chunk.excerpt,
                    is_turn=chunk.is_turn,
                    speaker=chunk.speaker,
                )
            )
        self.n_events += 1

    def _fact(self, number: int, r: dict[str, Any]) -> None:
        old = parse_id(_get(r, "id", str), "id")
        predicate = check_text("predicate", _get(r, "predicate", str), MAX_PREDICATE_CHARS)
        value = _present(r, "value")
        check_json_value("value", value, MAX_PAYLOAD_BYTES)
        confidence = _get(r, "confidence", (int, float), optional=True)
        check_confidence(None if confidence is None else float(confidence))
        status = _choice(r, "status", FactStatus)
        volatility = _choice(r, "volatility", Volatility)
        valid_from, valid_to = _date(r, "validFrom"), _date(r, "validTo")
        if status is FactStatus.ACTIVE:  # a superseded fact's validTo may end before it began
            check_validity(valid_from, valid_to)
        recorded_at = _date(r, "recordedAt", required=True)
        assert recorded_at is not None
        version = _get(r, "version", int)
        if isinstance(version, bool) or version < 1:
            raise InvalidInput("version must be a positive integer", field="version")
        sources = []
        for raw in _get(r, "sourceEventIds", list):
            source = parse_id(raw if isinstance(raw, str) else "", "sourceEventIds")
            if source not in self._events.new:
                raise InvalidInput(f"sourceEventIds names {source}, not an event of the file", field="sourceEventIds")
            sources.append(self._events.new[source])
        superseded_by = _get(r, "supersededBy", str, optional=True)
        open_conflict = _get(r, "openConflictId", str, optional=True)
        reason = _get(r, "retractReason", str, optional=True)
        check_optional_reason(reason)
        ended_at, end_reason = _fact_end(r, status, superseded_by is not None)
        reinforced_at = _dates(r, "reinforcedAt")
        fact_id = self._facts.define(old, number, "fact")
        if "endedAt" not in r and end_reason is FactEndReason.SUPERSEDED:
            self._undated.append(fact_id)  # a file written before history was kept
        if superseded_by is not None:  # the superseding fact comes later in the file, as a rule
            self._superseded_by.append((number, fact_id, parse_id(superseded_by, "supersededBy")))
        if open_conflict is not None:  # conflict sets come after every fact
            if status is not FactStatus.ACTIVE:
                raise InvalidInput("only an ACTIVE fact can be in an OPEN conflict set", field="openConflictId")
            self._open_member_of[old] = (number, parse_id(open_conflict, "openConflictId"))
            self._open_conflict.append((number, fact_id, parse_id(open_conflict, "openConflictId")))
        self._pending_facts.append(
            db_portability.RestoredFact(
                id=fact_id,
                subject_id=self._subject,
                predicate=predicate,
                value=value,
                value_hash=value_hash(value),
                confidence=confidence,
                status=status.value,
                volatility=volatility.value,
                valid_from=valid_from,
                valid_to=valid_to,
                recorded_at=recorded_at,
                last_reinforced_at=_date(r, "lastReinforcedAt"),
                source_event_ids=sorted(sources),
                superseded_by=None,
                version=version,
                open_conflict_id=None,
                retract_reason=reason,
                text=fact_text(predicate, value),
                ended_at=ended_at,
                end_reason=end_reason.value if end_reason else None,
                active_valid_to=_date(r, "activeValidTo"),
                reinforced_at=reinforced_at,
            )
        )
        self.n_facts += 1

    async def _conflict(self, conn: asyncpg.Connection, number: int, r: dict[str, Any]) -> None:
        old = parse_id(_get(r, "id", str), "id")
        status = _choice(r, "status", ConflictStatus)
        reason = _get(r, "reason", str, optional=True)
        check_optional_reason(reason)
        members = [parse_id(raw if isinstance(raw, str) else "", "factIds") for raw in _get(r, "factIds", list)]
        if len(members) < MIN_CONFLICT_FACTS or len(set(members)) != len(members):
            raise InvalidInput(f"factIds must hold {MIN_CONFLICT_FACTS}+ distinct ids", field="factIds")
        unknown = [m for m in members if m not in self._facts.new]
        if unknown:
            raise InvalidInput(f"factIds names {unknown[0]}, not a fact of the file", field="factIds")
        kept = _get(r, "keptFactId", str, optional=True)
        if kept is not None and parse_id(kept, "keptFactId") not in members:
            raise InvalidInput("keptFactId is not a member of the set", field="keptFactId")
        created_at = _date(r, "createdAt", required=True)
        assert created_at is not None
        added_at = _members_added_at(r, len(members))
        conflict_id = self._conflicts.define(old, number, "conflict")
        if status is ConflictStatus.OPEN:
            self._open_sets[old] = set(members)
        await db_portability.insert_conflict(
            conn,
            self._project,
            conflict_id=conflict_id,
            subject_id=self._subject,
            status=status.value,
            reason=reason,
            created_at=created_at,
            resolved_at=_date(r, "resolvedAt"),
            kept_fact_id=None if kept is None else self._facts.new[parse_id(kept)],
            fact_ids=[self._facts.new[m] for m in members],
            added_at=added_at,
        )
        self.n_conflicts += 1

    async def _flush_events(self, conn: asyncpg.Connection) -> None:
        if not self._pending_events:
            return
        vectors = await self._rt.embedder.embed_many([c.text for c in self._pending_chunks])
        await db_events.insert_events(conn, self._project, self._pending_events)
        await db_events.insert_chunks(conn, self._project, self._pending_chunks, vectors)
        self.grown += await db_events.add_chunk_counts(conn, self._project, self._pending_chunks)
        self._pending_events, self._pending_chunks = [], []

    async def _flush_facts(self, conn: asyncpg.Connection) -> None:
        if not self._pending_facts:
            return
        vectors = await self._rt.embedder.embed_many([f.text for f in self._pending_facts])
        await db_portability.insert_facts(conn, self._project, self._pending_facts, vectors)
        self.grown += await db_scope_indexes.add_rows(
            conn, self._project, "facts", {self._subject: len(self._pending_facts)}
        )
        self._pending_facts = []

    async def finish(self, conn: asyncpg.Connection, trailer: dict[str, Any] | None) -> None:
        """Write what is pending, then check what could only be checked at the end."""
        await self._flush_events(conn)
        await self._flush_facts(conn)
        if trailer is None:
            raise InvalidInput(
                "the file has no last line: it is cut short (an export that did not finish)", field="file"
            )
        said = (trailer.get("events"), trailer.get("facts"), trailer.get("conflicts"))
        if said != (self.n_events, self.n_facts, self.n_conflicts):
            raise InvalidInput(
                f"the last line counts {said[0]} events, {said[1]} facts and {said[2]} conflicts; "
                f"the file holds {self.n_events}, {self.n_facts} and {self.n_conflicts}",
                field="file",
            )
        for number, _, target in self._superseded_by:
            if target not in self._facts.new:
                raise InvalidInput(f"line {number}: supersededBy names {target}, not a fact of the file", field="file")
        for fact, (number, conflict) in self._open_member_of.items():
            if fact not in self._open_sets.get(conflict, set()):
                raise InvalidInput(
                    f"line {number}: openConflictId names {conflict}, not an OPEN set of the file holding the fact",
                    field="file",
                )
        for conflict, members in self._open_sets.items():
            outside = [m for m in sorted(members) if self._open_member_of.get(m, (0, ""))[1] != conflict]
            if outside:
                raise InvalidInput(
                    f"the OPEN conflict set {conflict} holds fact {outside[0]}, whose openConflictId is not the set",
                    field="file",
                )
        await db_portability.link_facts(
            conn,
            self._project,
            [(fact, self._facts.new[target]) for _, fact, target in self._superseded_by],
            [(fact, self._conflicts.new[target]) for _, fact, target in self._open_conflict],
        )
        if self._undated:
            await db_portability.date_supersessions(conn, self._project, self._undated)


def _get(r: dict[str, Any], key: str, kind: type | tuple[type, ...], *, optional: bool = False) -> Any:
    value = r.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, kind):
        raise InvalidInput(f"{key} is missing or of the wrong type", field=key)
    return value


def _present(r: dict[str, Any], key: str) -> Any:
    if key not in r:
        raise InvalidInput(f"{key} is missing", field=key)
    return r[key]


def _date(r: dict[str, Any], key: str, *, required: bool = False) -> datetime | None:
    raw = r.get(key)
    if raw is None:
        if required:
            raise InvalidInput(f"{key} is required", field=key)
        return None
    if not isinstance(raw, str):
        raise InvalidInput(f"{key} must be an ISO-8601 date-time", field=key)
    try:
        value = datetime.fromisoformat(raw)
    except ValueError:
        raise InvalidInput(f"{key} is not an ISO-8601 date-time: {raw[:64]!r}", field=key) from None
    check_aware(key, value)
    return value


def _fact_end(r: dict[str, Any], status: FactStatus, superseded: bool) -> tuple[datetime | None, FactEndReason | None]:
    """When and why an imported fact stopped being ACTIVE. A file exported before ends were kept
    has neither: the reason follows from the status and the supersession, the instant stays
    unknown (a supersession is dated once the superseding fact is in, as migration 0012 does)."""
    ended_at = _date(r, "endedAt")
    raw = r.get("endReason")
    if status is FactStatus.ACTIVE:
        if ended_at is not None or raw is not None or r.get("activeValidTo") is not None:
            raise InvalidInput("an ACTIVE fact has no endedAt, endReason or activeValidTo", field="endReason")
        return None, None
    if raw is None:
        return ended_at, FactEndReason.SUPERSEDED if superseded else FactEndReason(status.value)
    reason: FactEndReason = _choice(r, "endReason", FactEndReason)
    if reason is FactEndReason.SUPERSEDED and not superseded:
        raise InvalidInput("endReason SUPERSEDED needs supersededBy", field="endReason")
    if reason is FactEndReason.RETRACTED and status is not FactStatus.RETRACTED:
        raise InvalidInput("endReason RETRACTED needs status RETRACTED", field="endReason")
    return ended_at, reason


def _members_added_at(r: dict[str, Any], n_members: int) -> list[datetime | None]:
    """When each member joined the set, in the order of factIds; unknown (None) when not given."""
    dates = _dates(r, "membersAddedAt")
    if dates is None:
        return [None] * n_members
    if len(dates) != n_members:
        raise InvalidInput("membersAddedAt must list one date-time per member of factIds", field="membersAddedAt")
    return list(dates)


def _dates(r: dict[str, Any], key: str) -> list[datetime] | None:
    """A list of date-times (at most MAX_HISTORY_DATES), or None when the key is absent."""
    raw = r.get(key)
    if raw is None:
        return None
    if not isinstance(raw, list) or len(raw) > MAX_HISTORY_DATES:
        raise InvalidInput(f"{key} must be a list of at most {MAX_HISTORY_DATES} date-times", field=key)
    out = []
    for x in raw:
        value = _date({key: x}, key, required=True)
        assert value is not None
        out.append(value)
    return out


def _choice(r: dict[str, Any], key: str, enum: Any) -> Any:
    raw = r.get(key)
    try:
        return enum(raw)
    except ValueError:
        names = ", ".join(m.value for m in enum)
        raise InvalidInput(f"{key} must be one of {names}", field=key) from None
