"""What a stored trace served: the packet's text, and the order the call packed its items in.

A trace stores decisions, not text. `rendered_of` rebuilds the packet's `rendered` from the
served (INCLUDED) decisions, the items' stored rows and the settings the call ran under, with
the functions the assembler builds it with (packing.fact_line, episode_line and
render_packet, texts.served_excerpt), each kind by rank. A fact's text, its dates and an episode chunk's text and excerpt never change once
written, so the same rows give the same lines at any later time.

`overall_ranks` numbers the ranked decisions in the one order the call packed them in: the
decisions' own `rank` counts within a kind, which under MERGED packing (the default) is not the
order the budget was spent in (packing.merged_order, as pack_merged takes them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

from ...db import served as db_served
from ...settings import Packing, Settings
from ..models import Decision, ItemKind
from ..packet import ContextTrace, TraceDecision
from ..serving.runtime import Runtime
from ..texts import served_excerpt
from . import settings_records
from .packing import episode_line, fact_date, fact_line, merged_order, render_packet
from .token_counts import counter_loaded


@dataclass(slots=True)
class RankedDecision(TraceDecision):
    """A decision with its place in the one order its call packed every ranked item in."""

    overall_rank: int | None = None


_DECISION_FIELDS = tuple(f.name for f in fields(TraceDecision))


def _is_hop(d: TraceDecision) -> bool:
    """A multi-hop fact: the one-hop pass names the entity it came through, the main pack none."""
    return d.item_kind is ItemKind.FACT and d.via_entity is not None


def overall_ranks(decisions: Sequence[TraceDecision], packing: Packing) -> list[int | None]:
    """Each decision's 1-based place in the order its call packed the ranked items in, in the
    order given; None for a blocked fact (never ranked).

    MERGED: the main pack's facts and episodes as one ranking by decreasing score, a fact first
    at a tie and each kind in its own rank order (as packing.pack_merged takes them), then the
    multi-hop facts, which take what budget is left. SECTIONS: facts, multi-hop facts, then
    episodes, each by rank."""
    ranked = [i for i, d in enumerate(decisions) if d.rank is not None]
    hops = [i for i in ranked if _is_hop(decisions[i])]
    episodes = [i for i in ranked if decisions[i].item_kind is ItemKind.EPISODE]
    facts = [i for i in ranked if decisions[i].item_kind is ItemKind.FACT and not _is_hop(decisions[i])]

    def by_rank(i: int) -> int:
        return decisions[i].rank or 0

    def score(i: int) -> float:
        value = decisions[i].score
        return value if value is not None else float("-inf")

    if packing is Packing.MERGED:
        sections = (sorted(facts, key=by_rank), sorted(episodes, key=by_rank))
        merged = merged_order([score(i) for i in sections[0]], [score(i) for i in sections[1]])
        order = [sections[which][i] for which, i in merged] + sorted(hops, key=by_rank)
    else:
        order = sorted(facts, key=by_rank) + sorted(hops, key=by_rank) + sorted(episodes, key=by_rank)
    places: list[int | None] = [None] * len(decisions)
    for place, i in enumerate(order, 1):
        places[i] = place
    return places


def with_overall_ranks(decisions: Sequence[TraceDecision], packing: Packing) -> list[TraceDecision]:
    """`decisions`, in the same order, each with its `overall_rank` (see overall_ranks)."""
    places = overall_ranks(decisions, packing)
    return [
        RankedDecision(**{name: getattr(d, name) for name in _DECISION_FIELDS}, overall_rank=place)
        for d, place in zip(decisions, places, strict=True)
    ]


# The settings of the calls whose traces were read, by (server settings, record): building one
# validates every setting, and a page of traces mostly shares one record.
_CALL_SETTINGS: dict[tuple[int, str], tuple[Settings, Settings]] = {}
_MOST_CALL_SETTINGS = 256


async def call_settings(rt: Runtime, project_id: str, settings_id: str | None) -> Settings:
    """The settings a call ran under: its settings record over the server's settings, or the
    server's own for a call made before records were kept (or whose record is not written yet,
    a call of this very request: it ran under the server's own)."""
    record = None if settings_id is None else await settings_records.by_id(rt, project_id, settings_id)
    if record is None:
        return rt.settings
    key = (id(rt.settings), record.id)
    hit = _CALL_SETTINGS.get(key)
    if hit is not None and hit[0] is rt.settings:
        return hit[1]
    settings = settings_records.settings_with(rt.settings, record)
    if len(_CALL_SETTINGS) >= _MOST_CALL_SETTINGS:
        _CALL_SETTINGS.clear()
    _CALL_SETTINGS[key] = (rt.settings, settings)  # holding the base keeps its id unique
    return settings


async def ranked_decisions(
    rt: Runtime, project_id: str, trace: ContextTrace, decisions: Sequence[TraceDecision]
) -> list[TraceDecision]:
    """A trace's decisions with their overall ranks, under the packing its call ran under."""
    settings = await call_settings(rt, project_id, trace.settings_id)
    return with_overall_ranks(decisions, settings.packing)


async def rendered_of(
    rt: Runtime, project_id: str, trace: ContextTrace, decisions: Sequence[TraceDecision]
) -> str | None:
    """The `rendered` text the call served, rebuilt (see the module's doc); "" when it served
    nothing. None when a served item is no longer stored (its subject was forgotten), or when a
    line no longer comes out at the tokens the call recorded for it (a trace older than its
    settings record, made under another excerpt format): the text would not be what was served."""
    served = sorted((d for d in decisions if d.decision is Decision.INCLUDED), key=lambda d: d.rank or 0)
    if not served:
        return ""
    settings = await call_settings(rt, project_id, trace.settings_id)
    count_tokens = await counter_loaded(settings.tokenizer)
    fact_ids = [d.item_id for d in served if d.item_kind is ItemKind.FACT]
    chunks = [(d.item_id, d.chunk or 0) for d in served if d.item_kind is ItemKind.EPISODE]
    rows = await rt.reads.run(lambda conn: db_served.served_items(conn, project_id, fact_ids, chunks))
    found = {(row["item_kind"], str(row["item_id"]), row["chunk"]): row for row in rows}
    lines: dict[str, list[str]] = {"facts": [], "hops": [], "episodes": []}
    for d in served:
        row = found.get((d.item_kind.value, d.item_id, d.chunk))
        if row is None:
            return None
        if d.item_kind is ItemKind.FACT:
            line = fact_line(row["text"], fact_date(row["valid_from"], row["recorded_at"]))
        else:
            excerpt = served_excerpt(
                settings.episode_excerpt_format,
                row["text"],
                row["excerpt"],
                row["is_turn"],
                settings.episode_excerpt_chars,
            )
            line = episode_line(excerpt, row["occurred_at"])
        if count_tokens(line) != d.tokens:
            return None
        lines["episodes" if d.item_kind is ItemKind.EPISODE else "hops" if _is_hop(d) else "facts"].append(line)
    return render_packet(lines["facts"], lines["hops"], lines["episodes"])
