"""The lines of `GET /export?subjectId=S`, checked as they pass.

The server streams a subject's memory as JSON lines: a header (`format`, `version`,
`subjectId`, `exportedAt`), then one line per event, fact and conflict set (`type`), then
`{"type": "end", "events": n, "facts": n, "conflicts": n}`. The end line is the only proof that
the stream is whole, so the client counts the records and raises `IncompleteExportError` when it
is missing or disagrees, after handing out the lines before it.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from .errors import IncompleteExportError, InvalidResponseError

FORMAT = "haki-context/subject"
# The end line's count of each record type.
COUNTED = {"event": "events", "fact": "facts", "conflict": "conflicts"}


class ExportCheck:
    """Parses the lines of one export in order and checks that it is whole at the end."""

    def __init__(self, subject_id: str) -> None:
        self.subject_id = subject_id
        self.lines = 0
        self.counts: Counter[str] = Counter()
        self.ended = False

    def parse(self, line: str) -> dict[str, Any]:
        """One line as a dict; InvalidResponseError for a line that is no export record."""
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise InvalidResponseError(f"an export line is not JSON: {line[:200]!r}") from exc
        if not isinstance(record, dict) or self.ended:
            raise InvalidResponseError(f"unexpected export line: {line[:200]!r}")
        if self.lines == 0 and record.get("format") != FORMAT:
            raise InvalidResponseError(f"not a {FORMAT} export: {line[:200]!r}")
        self.lines += 1
        kind = record.get("type")
        if kind == "end":
            self.ended = True
            expected = {name: record.get(name) for name in COUNTED.values()}
            seen = {name: self.counts[kind_] for kind_, name in COUNTED.items()}
            if expected != seen:
                raise IncompleteExportError(
                    f"the export of {self.subject_id!r} announces {expected} records but holds {seen}"
                )
        elif isinstance(kind, str):
            self.counts[kind] += 1
        return record

    def finish(self) -> None:
        """Raise IncompleteExportError unless the end line came."""
        if not self.ended:
            raise IncompleteExportError(
                f"the export of {self.subject_id!r} stopped after {self.lines} line(s) without its end line"
            )
