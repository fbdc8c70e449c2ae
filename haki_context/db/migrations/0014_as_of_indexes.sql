-- What `context(asOf:)` reads to leave out what came after its instant, and to find what has
-- ended since (db/as_of.py): both are few rows at a recent instant, found through these
-- indexes instead of reading every row of the scope. Facts already have
-- facts_scope_recorded; only an ended fact enters the second index (a supersession or a
-- retraction, which write the row anyway).
CREATE INDEX events_scope_recorded ON events (project_id, subject_id, recorded_at);
CREATE INDEX facts_scope_ended ON facts (project_id, subject_id, ended_at) WHERE ended_at IS NOT NULL;
