"""The contract's enums: the core's enums, exposed to GraphQL by name.

`strawberry.enum` marks each class in place and returns it, so these names are the
core's own classes: a GraphQL argument arrives as the core's member, and mypy sees
a class where a type is expected.
"""

from __future__ import annotations

import strawberry

from ..core.models import (
    AssertMode,
    AssertOutcome,
    ConflictStatus,
    Decision,
    EmptyReason,
    FactEndReason,
    FactStatus,
    ItemKind,
    PacketStatus,
    ReasonCode,
    Volatility,
)

for _enum in (
    FactStatus,
    FactEndReason,
    Volatility,
    AssertMode,
    AssertOutcome,
    ConflictStatus,
    PacketStatus,
    EmptyReason,
    ItemKind,
    Decision,
    ReasonCode,
):
    strawberry.enum(_enum)

__all__ = [
    "AssertMode",
    "AssertOutcome",
    "ConflictStatus",
    "Decision",
    "EmptyReason",
    "FactEndReason",
    "FactStatus",
    "ItemKind",
    "PacketStatus",
    "ReasonCode",
    "Volatility",
]
