-- What each context call ran under, and the instant it answered for.
--
-- A settings record is every setting that changes a decision (the ranking profile, weights,
-- candidate counts, the gate, the horizons, the search plan's settings) and the embedder's
-- identity, as canonical JSON; its id is the SHA-256 of that JSON, so a record is written once
-- per project and referenced by every trace made under it (core/settings_records.py). Traces
-- written before this migration have none: a replay of them runs under the settings of now.
CREATE TABLE settings_records (
    project_id  text NOT NULL,
    id          text NOT NULL,
    body        jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (project_id, id)
);

-- settings_id: the record the call ran under. as_of: the past instant a `context(asOf:)` call
-- answered for (NULL: the call's own instant, created_at).
ALTER TABLE context_traces
    ADD COLUMN settings_id text,
    ADD COLUMN as_of timestamptz;
