"""Input limits (docs/design.md "Errors"): every check raises a typed domain error."""

from __future__ import annotations

import math
import re
import uuid
from datetime import datetime
from typing import Any

from .errors import BudgetExceeded, InvalidInput
from .texts import compact_json

MAX_ID_CHARS = 128
MAX_KIND_CHARS = 128
MAX_PREDICATE_CHARS = 128
MAX_REASON_CHARS = 2000
MAX_QUERY_CHARS = 4000
MAX_PAYLOAD_BYTES = 256 * 1024
MAX_BATCH = 1000
MAX_CONFLICT_FACTS = 250
MIN_CONFLICT_FACTS = 2
MAX_PAGE_SIZE = 100
DEFAULT_BUDGET = 900  # the public contract's default for `context(budget:)`


def check_text(field: str, value: str, max_chars: int, *, min_chars: int = 1) -> str:
    """A stored string: `min_chars..max_chars` characters, not blank, no NUL."""
    if "\x00" in value:
        raise InvalidInput(f"{field} must not contain NUL characters", field=field)
    if len(value.strip()) < min_chars or len(value) > max_chars:
        raise InvalidInput(f"{field} must be {min_chars}..{max_chars} characters", field=field)
    return value


def check_subject_id(value: str, field: str = "subjectId") -> str:
    return check_text(field, value, MAX_ID_CHARS)


def check_optional_reason(value: str | None) -> str | None:
    return None if value is None else check_text("reason", value, MAX_REASON_CHARS)


def parse_id(raw: str, field: str = "id") -> str:
    """A contract id (a UUID); malformed ids are INVALID_INPUT."""
    parsed = try_parse_id(raw)
    if parsed is None:
        raise InvalidInput(f"{field} is not a valid id", field=field)
    return parsed


# A UUID already in canonical form: itself, without parsing it through uuid.UUID (a debugging
# selection's decisions look up a hundred or more ids).
_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def try_parse_id(raw: str) -> str | None:
    """The canonical UUID string, or None for anything malformed (reads answer null)."""
    if not isinstance(raw, str) or not 1 <= len(raw) <= MAX_ID_CHARS:
        return None
    if _CANONICAL_UUID.fullmatch(raw):
        return raw
    try:
        return str(uuid.UUID(raw))
    except ValueError:
        return None


def parse_ids(raws: list[str], field: str) -> list[str]:
    return [parse_id(r, field) for r in raws]


def check_page_size(first: int | None, default: int) -> int:
    size = default if first is None else first
    if not 1 <= size <= MAX_PAGE_SIZE:
        raise InvalidInput(f"first must be 1..{MAX_PAGE_SIZE}", field="first")
    return size


def check_confidence(value: float | None) -> float | None:
    if value is None:
        return None
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise InvalidInput("confidence must be within 0..1", field="confidence")
    return value


def check_validity(valid_from: datetime | None, valid_to: datetime | None) -> None:
    check_aware("validFrom", valid_from)
    check_aware("validTo", valid_to)
    if valid_from is not None and valid_to is not None and valid_to <= valid_from:
        raise InvalidInput("validTo must be after validFrom", field="validTo")


def check_aware(field: str, value: datetime | None) -> None:
    if value is not None and value.utcoffset() is None:
        raise InvalidInput(f"{field} needs a UTC offset", field=field)


def check_json_value(field: str, value: Any, max_bytes: int) -> str:
    """A JSON value to store: serialisable, at most `max_bytes` serialised, no NUL anywhere."""
    try:
        serialized = compact_json(value)
    except TypeError as exc:
        raise InvalidInput(f"{field} is not valid JSON", field=field) from exc
    if len(serialized.encode()) > max_bytes:
        raise InvalidInput(f"{field} must be at most {max_bytes} bytes serialized", field=field)
    # PostgreSQL jsonb cannot hold U+0000, and it is never meaningful text.
    if "\\u0000" in serialized or "\x00" in serialized:
        raise InvalidInput(f"{field} must not contain NUL characters", field=field)
    return serialized


def check_budget(budget: int | None, maximum: int) -> int:
    """A context call's token budget: DEFAULT_BUDGET when omitted, 1..`maximum` (HAKI_MAX_BUDGET)."""
    value = DEFAULT_BUDGET if budget is None else budget
    if value <= 0 or value > maximum:
        raise BudgetExceeded(f"budget must be a positive integer of at most {maximum}", field="budget")
    return value


def clean_query(query: str) -> str:
    """A context query: NUL stripped, non-blank, at most 4,000 characters."""
    query = query.replace("\x00", "")
    if not query.strip():
        raise InvalidInput("query must not be blank", field="query")
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidInput(f"query must be at most {MAX_QUERY_CHARS} characters", field="query")
    return query
