-- One HNSW index per large scope instead of one over every scope.
--
-- A table-wide HNSW index serves a subject that holds 10% of the rows badly: the scan walks
-- the graph through the other subjects' rows and filters them out, and with a filter that
-- selective it misses rows and takes long (docs/performance.md).
-- A partial index per scope (`WHERE project_id = ... AND subject_id = ...`, built by
-- db/scope_indexes.py once a scope reaches HAKI_SCOPE_INDEX_ROWS) holds that scope's rows
-- only, so its scan finds nearly all of the true top rows, fast (docs/performance.md). Smaller scopes keep the exact scan of 0006's covering index.
--
-- The table-wide indexes are dropped: they served no plan any more and every insert paid
-- for them (an HNSW insert costs more than the rest of the row's indexes together).
CREATE TABLE scope_vector_indexes (
    project_id  text NOT NULL,
    subject_id  text NOT NULL,
    table_name  text NOT NULL CHECK (table_name IN ('facts', 'episode_chunks')),
    index_name  text NOT NULL UNIQUE,
    requested_at timestamptz NOT NULL DEFAULT now(),
    ready_at    timestamptz,  -- NULL while the build runs (or after it failed); retrieval uses READY ones only
    PRIMARY KEY (project_id, subject_id, table_name)
);

DROP INDEX IF EXISTS facts_embedding;
DROP INDEX IF EXISTS episode_chunks_embedding;
