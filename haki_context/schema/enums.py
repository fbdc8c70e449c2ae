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
from ..settings import Tokenizer

# Descriptions GraphiQL shows for the enums whose values a client acts on.
_DESCRIPTIONS: dict[type, str] = {
    EmptyReason: (
        "Why a packet serves nothing. NO_RELEVANT_MEMORY: the recall gate set every candidate aside "
        "(the subject holds memory, none of it about the query). NO_MEMORY: the subject held nothing "
        "to consider at the call's instant. BUDGET_TOO_SMALL: items fit for the query were found but "
        "none fits the budget (the trace's OVER_BUDGET decisions give their tokens)."
    ),
    Tokenizer: (
        "What a packet's budget and usedTokens count. ESTIMATE: a served line's characters / 4 "
        "(the default, HAKI_TOKENIZER; real tokenizers count 11-33% more on conversation text). "
        "CL100K_BASE: OpenAI's GPT-4 and GPT-3.5 encoding. O200K_BASE: OpenAI's GPT-4o encoding "
        "and later models'. Under either encoding the packet's rendered text counts at most "
        "usedTokens in it."
    ),
}

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
    Tokenizer,
):
    strawberry.enum(_enum, description=_DESCRIPTIONS.get(_enum))

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
    "Tokenizer",
    "Volatility",
]
