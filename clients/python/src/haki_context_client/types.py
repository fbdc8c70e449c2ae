"""Readable names for the generated result models (the generator names them after the operation
and the field path, e.g. `ContextContext`); the classes themselves are the generated ones.

Every model is a pydantic model with snake_case attributes (`packet.trace_id`); `model_dump(
by_alias=True)` gives the GraphQL names back. Facts and events returned by different operations
are subclasses of `Fact` and `Event`, so `isinstance(x, Fact)` holds for all of them.
"""

from __future__ import annotations

from ._generated.assert_fact import AssertFactAssertFact, AssertFactAssertFactConflict
from ._generated.context import ContextContext, ContextContextEpisodes, ContextContextFacts
from ._generated.enums import (
    AssertMode,
    AssertOutcome,
    ConflictStatus,
    Decision,
    EmptyReason,
    FactStatus,
    ItemKind,
    PacketStatus,
    RankingProfile,
    ReasonCode,
    ReplayChangeKind,
    Tokenizer,
    Volatility,
)
from ._generated.events import EventsEvents
from ._generated.facts import FactsFacts
from ._generated.forget_subject import ForgetSubjectForgetSubject
from ._generated.fragments import (
    EventFields,
    FactFields,
    PageInfoFields,
    ReplayDecisionFields,
    TraceSummaryFields,
    TraceSummaryFieldsCounts,
    TraceSummaryFieldsTimings,
)
from ._generated.get_trace import GetTraceTrace, GetTraceTraceDecisions
from ._generated.input_types import EventInput, FactInput, ReplayOverrides
from ._generated.replay import ReplayReplay, ReplayReplayDiff, ReplayReplayDiffChanges
from ._generated.stats import StatsStats
from ._generated.traces import TracesTraces

ContextPacket = ContextContext
"""What `context` returns: `rendered` (the text for the prompt), `facts`, `episodes`, `trace_id`..."""
PacketFact = ContextContextFacts
"""A fact served in a packet, with its id, validity, score and reason code."""
Episode = ContextContextEpisodes
"""An episode chunk served in a packet."""
Event = EventFields
"""A recorded event."""
Fact = FactFields
"""A fact with its lifecycle (status, version, validity, sources)."""
FactAssertion = AssertFactAssertFact
"""What `assert_fact` did: `outcome`, the `fact`, the facts it `superseded`, a `conflict` it opened."""
ConflictSummary = AssertFactAssertFactConflict
"""The conflict set an assertion opened (mode CONTEST)."""
Trace = GetTraceTrace
"""A context call's persisted trace with its decisions."""
TraceDecision = GetTraceTraceDecisions
"""One fact or episode considered by a context call, and what was decided."""
TraceSummary = TraceSummaryFields
"""A trace without its decisions (as `traces` lists them)."""
TraceCounts = TraceSummaryFieldsCounts
TraceTimings = TraceSummaryFieldsTimings
TracePage = TracesTraces
"""A page of traces: `edges` (`cursor`, `node`) and `page_info` (`has_next_page`, `end_cursor`)."""
FactPage = FactsFacts
"""A page of facts."""
EventPage = EventsEvents
"""A page of events."""
PageInfo = PageInfoFields
ForgetResult = ForgetSubjectForgetSubject
"""What `forget_subject` deleted, by kind, and the id of its audit record."""
Stats = StatsStats
"""The project's usage overview."""
Replay = ReplayReplay
"""What `replay` returns: `as_of`, `compared_with_now`, `notes`, the `settings` it ran under, the
new `packet`, the `original` trace, and the `diff` against the stored decisions."""
ReplayDiff = ReplayReplayDiff
"""How a replay's decisions differ: `identical`, the counts (`added`, `removed`, `moved`,
`score_changed`, `decision_changed`) and every `changes` item."""
ReplayChange = ReplayReplayDiffChanges
"""One item decided otherwise: `kinds`, `before` and `after`, `rank_delta`, `components_changed`,
and `why` (compared with now: superseded or retracted since, recorded after the call...)."""
ReplayDecision = ReplayDecisionFields
"""A decision of a replay's change, with the fact's predicate and value."""

__all__ = [
    "AssertMode",
    "AssertOutcome",
    "ConflictStatus",
    "ConflictSummary",
    "ContextPacket",
    "Decision",
    "EmptyReason",
    "Episode",
    "Event",
    "EventInput",
    "EventPage",
    "Fact",
    "FactAssertion",
    "FactInput",
    "FactPage",
    "FactStatus",
    "ForgetResult",
    "ItemKind",
    "PacketFact",
    "PacketStatus",
    "PageInfo",
    "RankingProfile",
    "ReasonCode",
    "Replay",
    "ReplayChange",
    "ReplayChangeKind",
    "ReplayDecision",
    "ReplayDiff",
    "ReplayOverrides",
    "Stats",
    "Tokenizer",
    "Trace",
    "TraceCounts",
    "TraceDecision",
    "TracePage",
    "TraceSummary",
    "TraceTimings",
    "Volatility",
]
