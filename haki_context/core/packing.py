"""Packing under a token budget (DESIGN.md step 7) and the `rendered` text.

An item's tokens are `max(1, len(line) // 4)` of the line it adds to
`rendered`: so `usedTokens` is exactly what the agent pastes, and never more
than the budget.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TypeVar

T = TypeVar("T")


def tokens(text: str) -> int:
    return max(1, len(text) // 4)


def fact_line(text: str, dated: datetime) -> str:
    """A fact as served: its text and the date it holds from."""
    return f"- {text} ({dated.date().isoformat()})"


def episode_line(excerpt: str, occurred_at: datetime) -> str:
    """An episode as served: when it happened, then its excerpt."""
    return f"- [{occurred_at.strftime('%Y-%m-%d %H:%M')}] {excerpt}"


def pack(items: Sequence[T], cost: Callable[[T], int], budget_left: int) -> tuple[list[T], list[T], int]:
    """Take items in order while they fit; one that does not fit is skipped and
    packing goes on (a smaller one may still fit). Returns (kept, over, budget left)."""
    kept: list[T] = []
    over: list[T] = []
    for item in items:
        c = cost(item)
        if c <= budget_left:
            kept.append(item)
            budget_left -= c
        else:
            over.append(item)
    return kept, over, budget_left


def render(lines: Sequence[str]) -> str:
    return "\n".join(lines)
