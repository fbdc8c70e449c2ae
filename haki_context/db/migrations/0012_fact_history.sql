-- History kept: when a fact stopped being ACTIVE and why, and when each fact joined a conflict set.
--
-- Facts are bitemporal: valid time (valid_from, valid_to: when the statement holds in the world)
-- and system time (recorded_at: when the server learned it; ended_at: when it stopped being
-- ACTIVE). end_reason says why it ended: SUPERSEDED (superseded_by names the fact that replaced
-- it) or RETRACTED. A fact retracted after it was superseded keeps SUPERSEDED and the instant of
-- its supersession: that is when it stopped being served. Together with conflict_sets'
-- created_at and resolved_at (set when a set is RESOLVED or DISMISSED) and conflict_members'
-- added_at, this is what `context(asOf:)` reads to rebuild the memory as it stood at an instant.
--
-- Two values a write changes in place are kept too, since a past instant reads what they were:
-- a supersession cuts valid_to at the successor's validFrom (or at the supersession), so
-- active_valid_to keeps the valid_to the fact had while ACTIVE (meaningful once it is
-- SUPERSEDED; NULL: open-ended); a reinforcement moves last_reinforced_at, from which the
-- volatility horizons run, so reinforced_at lists every reinforcement, oldest first.
ALTER TABLE facts
    ADD COLUMN ended_at timestamptz,
    ADD COLUMN end_reason text CHECK (end_reason IN ('SUPERSEDED', 'RETRACTED')),
    ADD COLUMN active_valid_to timestamptz,
    ADD COLUMN reinforced_at timestamptz[] NOT NULL DEFAULT '{}';

ALTER TABLE conflict_members ADD COLUMN added_at timestamptz;

-- Facts that ended before this migration. A supersession is dated exactly: a fact superseded by
-- resolveConflict ended when its set was resolved with the superseding fact kept; any other
-- supersession (assertFact in SUPERSEDE mode) happened in the transaction that recorded the
-- superseding fact, so it ended at that fact's recorded_at.
UPDATE facts f SET end_reason = 'SUPERSEDED',
    ended_at = coalesce(
        (SELECT max(c.resolved_at) FROM conflict_sets c
         JOIN conflict_members m ON m.project_id = c.project_id AND m.conflict_id = c.id
         WHERE c.project_id = f.project_id AND m.fact_id = f.id
           AND c.status = 'RESOLVED' AND c.kept_fact_id = f.superseded_by),
        (SELECT s.recorded_at FROM facts s WHERE s.project_id = f.project_id AND s.id = f.superseded_by))
WHERE f.status <> 'ACTIVE' AND f.superseded_by IS NOT NULL;

-- What valid_to was before the supersession cut it to the successor's validFrom (or to the
-- resolution, for a set resolved): a valid_to earlier than the cut was left as it was; one at the
-- cut was open-ended or later than it, which is no longer known: it counts as open-ended, as most
-- facts are.
UPDATE facts f SET active_valid_to = CASE WHEN f.valid_to < coalesce(
        (SELECT max(c.resolved_at) FROM conflict_sets c
         JOIN conflict_members m ON m.project_id = c.project_id AND m.conflict_id = c.id
         WHERE c.project_id = f.project_id AND m.fact_id = f.id
           AND c.status = 'RESOLVED' AND c.kept_fact_id = f.superseded_by),
        (SELECT coalesce(s.valid_from, s.recorded_at) FROM facts s
         WHERE s.project_id = f.project_id AND s.id = f.superseded_by))
    THEN f.valid_to END
WHERE f.end_reason = 'SUPERSEDED';

-- Only the last reinforcement was kept: earlier ones are lost.
UPDATE facts SET reinforced_at = ARRAY[last_reinforced_at] WHERE last_reinforced_at IS NOT NULL;

-- A retraction's instant was never kept (nor a supersession's where the superseding fact is not
-- known): ended_at stays NULL, meaning "ended, when unknown". `context(asOf:)` serves such a fact
-- at no past instant, since nothing shows it was still ACTIVE then.
UPDATE facts SET end_reason = status
WHERE status <> 'ACTIVE' AND end_reason IS NULL;

-- A fact that is not ACTIVE has ended, with a reason; an ACTIVE one has not.
ALTER TABLE facts ADD CONSTRAINT facts_end_matches_status
    CHECK ((status = 'ACTIVE') = (end_reason IS NULL) AND (ended_at IS NULL OR end_reason IS NOT NULL));

-- Members before this migration. Most joined when their set opened; a fact recorded after the
-- set opened (assertFact in CONTEST mode joining an open set) joined when it was recorded. An
-- earlier fact that joined an already open set alongside such a new one is dated from the set's
-- opening or its own recording, whichever is later: its true join instant was not kept.
UPDATE conflict_members m SET added_at = greatest(c.created_at, coalesce(
        (SELECT f.recorded_at FROM facts f WHERE f.project_id = m.project_id AND f.id = m.fact_id), c.created_at))
FROM conflict_sets c
WHERE c.project_id = m.project_id AND c.id = m.conflict_id;

ALTER TABLE conflict_members ALTER COLUMN added_at SET NOT NULL;
