"""Input limits (docs/design.md "Errors"): every check raises a typed domain error."""

from __future__ import annotations

import math
import re
import uuid
from datetime import UTC, datetime
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
# Deepest nesting of arrays and objects a request body may carry; a payload is far shallower.
MAX_JSON_DEPTH = 64
DEFAULT_BUDGET = 900  # the public contract's default for `context(budget:)`


def check_text(field: str, value: str, max_chars: int, *, min_chars: int = 1) -> str:
    """A stored string: `min_chars..max_chars` characters, not blank, no NUL, valid Unicode text."""
    if "\x00" in value:
        raise InvalidInput(f"{field} must not contain NUL characters", field=field)
    check_unicode(field, value)
    if len(value.strip()) < min_chars or len(value) > max_chars:
        raise InvalidInput(f"{field} must be {min_chars}..{max_chars} characters", field=field)
    return value


def check_unicode(field: str, value: str) -> str:
    """A string that encodes as UTF-8: a lone surrogate (a JSON escape such as `\\ud800` with no
    pair) is not text, and neither the database nor the tokenizer can take it."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInput(f"{field} must be valid Unicode text (it holds a lone surrogate)", field=field) from exc
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
    """A date-time with an offset that stays within years 1..9999 once converted to UTC (what
    Python and the database driver compute in); PostgreSQL's own range is wider. The driver
    stores the very first and very last instants as -infinity and infinity, which read back
    without an offset, so those two are refused too."""
    if value is None:
        return
    if value.utcoffset() is None:
        raise InvalidInput(f"{field} needs a UTC offset", field=field)
    try:
        utc = value.astimezone(UTC).replace(tzinfo=None)
    except OverflowError:
        utc = datetime.min
    if utc in (datetime.min, datetime.max):
        raise InvalidInput(f"{field} must be within years 1..9999 once converted to UTC", field=field)


# A JSON text's escape of U+0000: `\u0000` not itself escaped, that is preceded by an even
# number of backslashes (an escaped backslash followed by `u0000` is the literal text).
_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def check_json_value(field: str, value: Any, max_bytes: int) -> str:
    """A JSON value to store: serialisable, at most `max_bytes` serialised, no NUL, no lone
    surrogate, no NaN or Infinity anywhere."""
    try:
        serialized = compact_json(value)
    except TypeError as exc:
        raise InvalidInput(_unserializable(field, str(exc)), field=field) from exc
    if len(serialized.encode()) > max_bytes:
        raise InvalidInput(f"{field} must be at most {max_bytes} bytes serialized", field=field)
    # PostgreSQL jsonb cannot hold U+0000, and it is never meaningful text.
    if "\\u0000" in serialized and _NUL_ESCAPE.search(serialized):
        raise InvalidInput(f"{field} must not contain NUL characters", field=field)
    # The serializer writes NaN and Infinity as null: look for them only where a null is.
    if "null" in serialized and _has_non_finite(value):
        raise InvalidInput(f"{field} must not contain NaN or Infinity (not JSON numbers)", field=field)
    return serialized


def _unserializable(field: str, reason: str) -> str:
    if "surrogates" in reason:
        return f"{field} must be valid Unicode text (a string or key holds a lone surrogate)"
    if "64-bit" in reason:
        return f"{field} holds an integer outside the 64-bit range"
    if "recursion" in reason:
        return f"{field} nests too deeply"
    return f"{field} is not valid JSON"


def _has_non_finite(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float):
            if not math.isfinite(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return False


def check_json_depth(value: Any, max_depth: int = MAX_JSON_DEPTH) -> bool:
    """True when `value`'s arrays and objects nest at most `max_depth` deep (walked without
    recursion, so that no depth can exhaust the stack)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth >= max_depth:
            return False
        stack.extend((child, depth + 1) for child in children)
    return True


def check_budget(budget: int | None, maximum: int) -> int:
    """A context call's token budget: DEFAULT_BUDGET when omitted, 1..`maximum` (HAKI_MAX_BUDGET)."""
    value = DEFAULT_BUDGET if budget is None else budget
    if value <= 0 or value > maximum:
        raise BudgetExceeded(f"budget must be a positive integer of at most {maximum}", field="budget")
    return value


def clean_query(query: str) -> str:
    """A context query: NUL stripped, valid Unicode text, non-blank, at most 4,000 characters."""
    query = check_unicode("query", query.replace("\x00", ""))
    if not query.strip():
        raise InvalidInput("query must not be blank", field="query")
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidInput(f"query must be at most {MAX_QUERY_CHARS} characters", field="query")
    return query
