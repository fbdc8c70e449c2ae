-- Projects, keys, events with their episode chunks, facts and conflict sets.
-- Every key leads with project_id, so the tables distribute by project (Citus).

CREATE EXTENSION IF NOT EXISTS vector;

CREATE TABLE projects (
    project_id  text PRIMARY KEY,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE api_keys (
    project_id  text NOT NULL REFERENCES projects (project_id),
    key_id      uuid NOT NULL,
    key_hash    bytea NOT NULL,
    prefix      text NOT NULL,
    name        text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz,
    PRIMARY KEY (project_id, key_id)
);
-- The one lookup that cannot start from a project: the key tells the project.
CREATE UNIQUE INDEX api_keys_hash ON api_keys (key_hash);

-- Row counts per subject, kept by the write path: they choose the vector-search plan.
CREATE TABLE subjects (
    project_id  text NOT NULL,
    subject_id  text NOT NULL,
    fact_rows   bigint NOT NULL DEFAULT 0,
    chunk_rows  bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (project_id, subject_id)
);

CREATE TABLE events (
    project_id   text NOT NULL,
    id           uuid NOT NULL,
    subject_id   text NOT NULL,
    kind         text NOT NULL,
    payload      jsonb NOT NULL,
    occurred_at  timestamptz NOT NULL,
    recorded_at  timestamptz NOT NULL,
    excerpt      text NOT NULL,
    PRIMARY KEY (project_id, id)
);
CREATE INDEX events_scope ON events (project_id, subject_id, occurred_at DESC, id DESC);

CREATE TABLE episode_chunks (
    project_id     text NOT NULL,
    event_id       uuid NOT NULL,
    chunk          integer NOT NULL,
    subject_id     text NOT NULL,
    kind           text NOT NULL,
    occurred_at    timestamptz NOT NULL,
    text           text NOT NULL,
    excerpt        text NOT NULL,
    is_turn        boolean NOT NULL DEFAULT false,  -- a conversational turn: its text can be its excerpt
    speaker        text,                            -- who spoke the turn, when the payload says
    search_vector  tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED,
    embedding      vector(384) NOT NULL,
    PRIMARY KEY (project_id, event_id, chunk),
    FOREIGN KEY (project_id, event_id) REFERENCES events (project_id, id) ON DELETE CASCADE
);
CREATE INDEX episode_chunks_scope ON episode_chunks (project_id, subject_id);
CREATE INDEX episode_chunks_search ON episode_chunks USING gin (search_vector);
-- m = 32, ef_construction = 128: a denser graph than the default (m = 16) keeps recall under a
-- selective scope filter (docs/performance.md).
CREATE INDEX episode_chunks_embedding ON episode_chunks USING hnsw (embedding vector_cosine_ops)
    WITH (m = 32, ef_construction = 128);

CREATE TABLE facts (
    project_id          text NOT NULL,
    id                  uuid NOT NULL,
    subject_id          text NOT NULL,
    predicate           text NOT NULL,
    value               jsonb NOT NULL,
    value_hash          text NOT NULL,
    confidence          double precision,
    status              text NOT NULL CHECK (status IN ('ACTIVE', 'SUPERSEDED', 'RETRACTED')),
    volatility          text NOT NULL CHECK (volatility IN ('STABLE', 'SLOW', 'VOLATILE', 'EPHEMERAL')),
    valid_from          timestamptz,
    valid_to            timestamptz,
    recorded_at         timestamptz NOT NULL,
    last_reinforced_at  timestamptz,
    source_event_ids    uuid[] NOT NULL DEFAULT '{}',
    superseded_by       uuid,
    version             integer NOT NULL DEFAULT 1,
    open_conflict_id    uuid,   -- set while the fact is a member of an OPEN conflict set
    retract_reason      text,
    text                text NOT NULL,
    search_vector       tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED,
    embedding           vector(384) NOT NULL,
    PRIMARY KEY (project_id, id)
);
CREATE INDEX facts_scope ON facts (project_id, subject_id, status);
CREATE INDEX facts_scope_recorded ON facts (project_id, subject_id, recorded_at DESC, id DESC);
CREATE INDEX facts_predicate ON facts (project_id, subject_id, predicate) WHERE status = 'ACTIVE';
CREATE INDEX facts_open_conflict ON facts (project_id, subject_id) WHERE open_conflict_id IS NOT NULL;
-- Backstop against duplicate writes: one ACTIVE fact per (subject, predicate, value).
CREATE UNIQUE INDEX facts_active_value ON facts (project_id, subject_id, predicate, value_hash)
    WHERE status = 'ACTIVE';
CREATE INDEX facts_search ON facts USING gin (search_vector);
CREATE INDEX facts_embedding ON facts USING hnsw (embedding vector_cosine_ops)
    WITH (m = 32, ef_construction = 128);

CREATE TABLE conflict_sets (
    project_id    text NOT NULL,
    id            uuid NOT NULL,
    subject_id    text NOT NULL,
    status        text NOT NULL CHECK (status IN ('OPEN', 'RESOLVED', 'DISMISSED')),
    reason        text,
    created_at    timestamptz NOT NULL,
    resolved_at   timestamptz,
    kept_fact_id  uuid,
    PRIMARY KEY (project_id, id)
);
CREATE INDEX conflict_sets_scope ON conflict_sets (project_id, subject_id, created_at DESC, id DESC);
CREATE INDEX conflict_sets_status ON conflict_sets (project_id, status, created_at DESC, id DESC);

CREATE TABLE conflict_members (
    project_id   text NOT NULL,
    conflict_id  uuid NOT NULL,
    position     integer NOT NULL,
    fact_id      uuid NOT NULL,
    PRIMARY KEY (project_id, conflict_id, fact_id),
    FOREIGN KEY (project_id, conflict_id) REFERENCES conflict_sets (project_id, id) ON DELETE CASCADE
);
