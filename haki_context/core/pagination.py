"""Opaque keyset cursors: base64 of (timestamp, id). Never an OFFSET."""

from __future__ import annotations

import base64
from datetime import datetime

from .errors import InvalidInput
from .limits import check_aware, try_parse_id


def encode_cursor(at: datetime, item_id: str) -> str:
    raw = f"{at.isoformat()}|{item_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> tuple[datetime, str] | None:
    """The (timestamp, id) a cursor names; INVALID_INPUT when it is not one of ours."""
    if cursor is None:
        return None
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        at_text, item_id = base64.urlsafe_b64decode(padded.encode()).decode().split("|", 1)
        at = datetime.fromisoformat(at_text)
        parsed = try_parse_id(item_id)
        if parsed is None or at.utcoffset() is None:
            raise ValueError(item_id)
        check_aware("after", at)  # a forged cursor's date must fit where a real one does
        return at, parsed
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidInput("after is not a valid cursor", field="after") from exc
