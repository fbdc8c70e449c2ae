"""The instants a past-looking call may ask about (`context(asOf:)`, `replay`).

An instant after now is refused (nothing is known of it yet), and so is one before the project
existed: before its creation and before the earliest record it holds (an import keeps a file's
dates, which may be older than the project). The project's start is cached per process; it only
moves earlier (an import), so an instant before the cached start is checked again against the
database before it is refused.
"""

from __future__ import annotations

from datetime import UTC, datetime

from ...db import as_of as db_as_of
from ..errors import InvalidInput
from ..limits import check_aware
from ..serving.runtime import Runtime

_STARTS: dict[str, datetime] = {}
_MOST_STARTS = 10_000


async def check_as_of(rt: Runtime, project_id: str, as_of: datetime) -> datetime:
    """`as_of` in UTC when the project's memory can be asked about at it; INVALID_INPUT otherwise."""
    check_aware("asOf", as_of)
    at = as_of.astimezone(UTC)
    now = datetime.now(UTC)
    if at > now:
        raise InvalidInput(f"asOf {at.isoformat()} is in the future (now is {now.isoformat()})", field="asOf")
    start = _STARTS.get(project_id)
    if start is None or at < start:
        found = await rt.reads.run(lambda conn: db_as_of.project_start(conn, project_id))
        if found is None:
            raise InvalidInput("asOf: the project holds no memory yet, at any instant", field="asOf")
        start = found
        if len(_STARTS) >= _MOST_STARTS:
            _STARTS.clear()
        _STARTS[project_id] = start
    if at < start:
        raise InvalidInput(
            f"asOf {at.isoformat()} is before the project existed (its earliest record is {start.isoformat()})",
            field="asOf",
        )
    return at
