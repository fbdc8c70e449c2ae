"""The DateTime scalar: input must carry an offset; output is always UTC with offset."""

from __future__ import annotations

from datetime import UTC, datetime

import strawberry

from ..core.errors import InvalidInput


def _serialize(value: datetime) -> str:
    if value.utcoffset() is None:  # never produced by the database (timestamptz), kept as a guard
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat()


def _parse(value: object) -> datetime:
    if not isinstance(value, str):
        raise InvalidInput("a DateTime must be an ISO-8601 string with an offset")
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00") if value.endswith("Z") else value)
    except ValueError as exc:
        raise InvalidInput(f"not an ISO-8601 date-time: {value[:64]!r}") from exc
    if parsed.utcoffset() is None:
        raise InvalidInput(f"a DateTime needs an offset (e.g. +00:00): {value[:64]!r}")
    return parsed


DateTime = strawberry.scalar(
    name="DateTime",
    description="ISO-8601 date-time with offset, e.g. 2026-08-01T10:00:00+00:00",
    serialize=_serialize,
    parse_value=_parse,
)
