-- A large scope's full-text index of its own, beside its HNSW index (0007).
--
-- The table-wide GIN index over (project_id, subject_id, search_vector) (0006) answers a
-- word's rows in one scope by intersecting the word's posting list with the project's and
-- the subject's, and those grow with the table: for one word in a 100,000-row subject of a
-- 1,000,000-row table the index scan alone took 1.7-4.7 ms, and an episode statement
-- 22.5 ms (15.4 ms with the scope's own index; at 10,000 rows among 100,000, 15.8 -> 6.3 ms).
-- db/scope_indexes.py now builds a partial GIN index over the scope's search_vector with its
-- HNSW index; the planner picks it for the same reason (the statement's scope constants
-- imply its predicate). Scopes indexed before this migration get theirs at the next pass,
-- keeping their HNSW index in use meanwhile.
ALTER TABLE scope_vector_indexes
    ADD COLUMN text_index_name text UNIQUE,
    ADD COLUMN text_ready_at   timestamptz;  -- NULL until the scope's GIN index is built
