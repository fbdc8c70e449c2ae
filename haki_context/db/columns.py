"""Column lists shared by the SQL that reads events, facts and conflict sets."""

from __future__ import annotations

EVENT_COLUMNS = "id, subject_id, kind, payload, occurred_at, recorded_at, excerpt"

FACT_COLUMNS = (
    "id, subject_id, predicate, value, confidence, status, volatility, valid_from, valid_to, "
    "recorded_at, last_reinforced_at, source_event_ids, superseded_by, version, open_conflict_id, ended_at, end_reason"
)

CONFLICT_COLUMNS = (
    "c.id, c.subject_id, c.status, c.reason, c.created_at, c.resolved_at, c.kept_fact_id, "
    "ARRAY(SELECT m.fact_id FROM conflict_members m"
    " WHERE m.project_id = c.project_id AND m.conflict_id = c.id ORDER BY m.position) AS fact_ids"
)
