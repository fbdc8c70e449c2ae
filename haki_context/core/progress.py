"""Progress of a long job (`reembed`, `index-scopes`): rows done / total and a rate.

On a terminal it is one line updated in place; anywhere else (a log file, a server's
background job) a log line at most every `log_every_s` and one at the end, so logs
stay readable. The choice is made here alone: only a command run by a person asks for
the terminal line (`allow_terminal`), and only when stderr is a terminal.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from typing import TextIO

log = logging.getLogger(__name__)

_terminal_allowed = False


def allow_terminal(allowed: bool = True) -> None:
    """Let progress use an updating terminal line when stderr is a terminal (CLI commands only:
    a server's stderr is a log, where an updating line would garble the lines around it)."""
    global _terminal_allowed
    _terminal_allowed = allowed


class Progress:
    """Counts rows done out of `total` and reports them, with the rate since the start."""

    def __init__(
        self,
        what: str,
        total: int,
        *,
        stream: TextIO | None = None,
        terminal: bool | None = None,
        log_every_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.what = what
        self.total = total
        self.done_rows = 0
        self._stream = stream if stream is not None else sys.stderr
        if terminal is None:
            terminal = _terminal_allowed and _isatty(self._stream)
        self._terminal = terminal
        self._every = 0.2 if terminal else log_every_s
        self._clock = clock
        self._started = clock()
        self._last = self._started
        self._finished = False

    def update(self, n: int) -> None:
        """Record `n` more rows done; report if the last report is old enough."""
        self.done_rows += n
        now = self._clock()
        if now - self._last >= self._every:
            self._last = now
            self._report(now)

    def done(self) -> None:
        """Report the final count (once)."""
        if self._finished:
            return
        self._finished = True
        self._report(self._clock(), final=True)

    def line(self, now: float | None = None) -> str:
        """`<what>: <done>/<total> rows (<pct>%), <rate> rows/s`."""
        elapsed = (now if now is not None else self._clock()) - self._started
        rate = self.done_rows / elapsed if elapsed > 0 else 0.0
        share = f" ({100 * self.done_rows / self.total:.0f}%)" if self.total else ""
        return f"{self.what}: {self.done_rows}/{self.total} rows{share}, {rate:,.0f} rows/s, {elapsed:.1f} s"

    def _report(self, now: float, *, final: bool = False) -> None:
        text = self.line(now)
        if self._terminal:
            self._stream.write(f"\r{text}\033[K" + ("\n" if final else ""))
            self._stream.flush()
        else:
            log.info("%s", text)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.done()


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False
