"""`replay`: a stored context call run again, with the diff against what it decided then."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from enum import Enum
from typing import Annotated, Any

import strawberry
from strawberry.scalars import JSON

from ..core.errors import InvalidInput
from ..core.history import replay as core_replay
from ..core.history.replay_diff import ChangeKind, ItemChange
from ..core.serving.auth import Scope
from ..resolvers import replay as replay_resolvers
from ..settings import DEPRECATED_PROFILES, RankingProfile
from .enums import ItemKind
from .packet import ContextPacket, ContextTrace, TraceDecision
from .settings_record import SettingsRecordType, settings_type


@strawberry.enum(name="RankingProfile", description="A named set of ranking settings (HAKI_RANKING_PROFILE).")
class RankingProfileName(Enum):
    """The profiles a replay may name: settings.RankingProfile, and a former name kept for a release."""

    DEFAULT = strawberry.enum_value(RankingProfile.DEFAULT.value, description="The shipped ranking.")
    CLASSIC = strawberry.enum_value(
        RankingProfile.CLASSIC.value,
        description="The plain cosine-and-full-text ranking without cues: episodes by cosine alone (8,"
        " as compact JSON), facts by cosine and cover-density full text, facts packed first, no speaker,"
        " date or neighbour cue, cited turns served.",
    )
    SEED = strawberry.enum_value(
        "seed", deprecation_reason="Use CLASSIC: the same settings under the profile's current name."
    )


# The settings' profile each GraphQL value names; SEED names CLASSIC.
_PROFILES = {
    RankingProfileName.DEFAULT: RankingProfile.DEFAULT,
    RankingProfileName.CLASSIC: RankingProfile.CLASSIC,
    RankingProfileName.SEED: DEPRECATED_PROFILES["seed"],
}


strawberry.enum(ChangeKind, name="ReplayChangeKind", description="How an item's decision differs in a replay.")


@strawberry.input(name="ReplayOverrides", description="What a replay changes of the stored call; nothing by default.")
class ReplayOverridesInput:
    budget: int | None = strawberry.field(default=None, description="Another token budget (default: the call's).")
    profile: RankingProfileName | None = strawberry.field(
        default=None, description="Another ranking profile, its values applied over the recorded settings."
    )
    settings: JSON | None = strawberry.field(
        default=None,
        description='Decision settings by name and value, applied last, e.g. {"weight_recency": 0.3}'
        " (see SettingsRecord.values for the names).",
    )
    current_settings: bool = strawberry.field(
        default=False, description="Run under the server's current settings instead of the recorded ones."
    )


@strawberry.type(
    name="ReplayChange", description="One item whose decision differs between the stored call and the replay."
)
class ReplayChangeType:
    item_kind: ItemKind = strawberry.field(description="FACT or EPISODE.")
    item_id: strawberry.ID = strawberry.field(description="The fact id, or the episode's event id.")
    chunk: int | None = strawberry.field(description="The episode's chunk; null for facts.")
    kinds: list[ChangeKind] = strawberry.field(
        description="ADDED, REMOVED, or any of MOVED, SCORE_CHANGED and DECISION_CHANGED."
    )
    before: TraceDecision | None = strawberry.field(description="The stored decision; null when ADDED.")
    after: TraceDecision | None = strawberry.field(description="The replay's decision; null when REMOVED.")
    rank_delta: int | None = strawberry.field(
        description="The replay's rank less the stored one (negative: moved up); null unless both ranked it."
    )
    components_changed: list[str] = strawberry.field(
        description="The score components that differ: score, similarity, fullText, recency, distance."
    )
    why: str | None = strawberry.field(
        description="Why it changed: what changed in memory since the call, when it tells (compareWithNow):"
        " superseded or retracted since, recorded after the call, held in a conflict set now; else, for"
        ' SCORE_CHANGED, each component that moved and by how much, the score last ("recency 0.412 -> 0.398'
        ' (-0.014); score 0.701 -> 0.690 (-0.011)", or "score 0.701 -> none (blocked now, not scored)").'
        " Null when neither applies (a rank moved by other items, a decision changed by another budget)."
    )


@strawberry.type(name="ReplayDiff", description="How the replay's decisions differ from the stored call's.")
class ReplayDiffType:
    identical: bool = strawberry.field(description="True when every item was decided as before (no change).")
    added: int = strawberry.field(description="Items only the replay considered.")
    removed: int = strawberry.field(description="Items only the stored call considered.")
    moved: int = strawberry.field(description="Items ranked at another position.")
    score_changed: int = strawberry.field(description="Items with another score component.")
    decision_changed: int = strawberry.field(description="Items with another decision or reason code.")
    changes: list[ReplayChangeType] = strawberry.field(
        description="Every changed item: in the replay's order, then the removed ones in the stored order."
    )


@strawberry.type(name="Replay", description="A stored context call run again, and how it differs.")
class ReplayType:
    as_of: datetime = strawberry.field(description="The instant the replay answered for: the call's own, or now.")
    compared_with_now: bool = strawberry.field(description="True when asked of the memory as it stands now.")
    persisted: bool = strawberry.field(
        description="True when the replay's trace was written (persist: true); else packet.traceId names no stored trace."
    )
    notes: list[str] = strawberry.field(
        description="How the replay ran: the exact plan, settings that could not be restored, another embedder."
    )
    settings: SettingsRecordType = strawberry.field(description="The settings the replay ran under.")
    packet: ContextPacket = strawberry.field(description="The replay's packet, with its trace.")
    original: ContextTrace = strawberry.field(description="The stored call's trace.")
    diff: ReplayDiffType = strawberry.field(description="The replay's decisions against the stored ones.")


def _change(c: ItemChange) -> ReplayChangeType:
    return ReplayChangeType(
        item_kind=c.item_kind,
        item_id=strawberry.ID(c.item_id),
        chunk=c.chunk,
        kinds=list(c.kinds),
        before=c.before,  # type: ignore[arg-type]  # the core's decision: Strawberry resolves fields by name
        after=c.after,  # type: ignore[arg-type]
        rank_delta=c.rank_delta,
        components_changed=[_COMPONENT_NAMES[n] for n in c.components_changed],
        why=c.why,
    )


_COMPONENT_NAMES = {
    "score": "score",
    "similarity": "similarity",
    "full_text": "fullText",
    "recency": "recency",
    "distance": "distance",
}


def _overrides(given: ReplayOverridesInput | None) -> core_replay.ReplayOverrides | None:
    if given is None:
        return None
    settings: Mapping[str, Any] | None = None
    if given.settings is not None:
        if not isinstance(given.settings, dict):
            raise InvalidInput("with.settings must be an object of setting names and values", field="with.settings")
        settings = given.settings
    return core_replay.ReplayOverrides(
        budget=given.budget,
        profile=None if given.profile is None else _PROFILES[given.profile],
        settings=settings,
        current_settings=given.current_settings,
    )


async def replay_field(
    info: strawberry.Info,
    trace_id: strawberry.ID,
    with_: Annotated[ReplayOverridesInput | None, strawberry.argument(name="with")] = None,
    persist: bool = False,
    compare_with_now: bool = False,
) -> ReplayType:
    """Run a stored context call again (same subject, query and budget) at its own instant, under
    the settings it ran under unless `with` overrides them, by the exact plan; or, with
    compareWithNow, against the memory as it stands now. Returns the new packet and the diff
    against the stored decisions. Writes a trace only with persist: true. NOT_FOUND when the
    trace is not stored (unknown, pruned by retention, or its subject forgotten)."""
    info.context.require(Scope.READ)
    result = await replay_resolvers.replay(
        info.context,
        str(trace_id),
        overrides=_overrides(with_),
        persist=persist,
        compare_with_now=compare_with_now,
        path=(*info.path.as_list(), "packet"),
    )
    changes = result.diff
    return ReplayType(
        as_of=result.as_of,
        compared_with_now=result.compared_with_now,
        persisted=result.persisted,
        notes=list(result.notes),
        settings=settings_type(result.settings),
        packet=result.assembly.packet,  # type: ignore[arg-type]  # the core's packet, resolved by name
        original=result.original,  # type: ignore[arg-type]
        diff=ReplayDiffType(
            identical=changes.identical,
            added=changes.count(ChangeKind.ADDED),
            removed=changes.count(ChangeKind.REMOVED),
            moved=changes.count(ChangeKind.MOVED),
            score_changed=changes.count(ChangeKind.SCORE_CHANGED),
            decision_changed=changes.count(ChangeKind.DECISION_CHANGED),
            changes=[_change(c) for c in changes.changes],
        ),
    )
