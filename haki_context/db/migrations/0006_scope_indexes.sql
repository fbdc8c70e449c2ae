-- Indexes that lead with the scope, so a subject's search reads only its own rows.
--
-- 1. The exact vector scan, read from an index. Each vector is also kept in half precision
--    (halfvec, 768 bytes) inside a covering btree per scope, so scanning a subject reads its
--    vectors packed ten to a page instead of one heap page per row among other subjects'
--    rows. The scan ranks by the half-precision inner product (vectors are unit length, so
--    the order is the cosine order; near-ties aside); the distances served stay the
--    full-precision ones. The statements' scope filters are in the index (status by its
--    predicate, the rest as included columns): no row is fetched to rule it out, which beats
--    both the heap scan by cosine and the filtered HNSW scan (docs/performance.md).
-- 2. Full text by scope: btree_gin puts (project_id, subject_id) in the GIN index, so a
--    lexeme's rows of one subject come from one bitmap, not the AND of the lexeme's rows in
--    every subject with all of the subject's rows (docs/performance.md). They
--    replace the lexeme-only indexes: every full-text search is scoped.
ALTER TABLE facts
    ADD COLUMN embedding_half halfvec(384) GENERATED ALWAYS AS (embedding::halfvec(384)) STORED;
CREATE INDEX facts_scope_vectors ON facts (project_id, subject_id)
    INCLUDE (embedding_half, id, valid_from, valid_to, open_conflict_id) WHERE status = 'ACTIVE';

ALTER TABLE episode_chunks
    ADD COLUMN embedding_half halfvec(384) GENERATED ALWAYS AS (embedding::halfvec(384)) STORED;
CREATE INDEX episode_chunks_scope_vectors ON episode_chunks (project_id, subject_id)
    INCLUDE (embedding_half, event_id, chunk);

CREATE EXTENSION IF NOT EXISTS btree_gin;
CREATE INDEX facts_scope_search ON facts USING gin (project_id, subject_id, search_vector)
    WHERE status = 'ACTIVE';
CREATE INDEX episode_chunks_scope_search ON episode_chunks USING gin (project_id, subject_id, search_vector);
DROP INDEX facts_search;
DROP INDEX episode_chunks_search;
