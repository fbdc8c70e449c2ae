-- Keep embeddings in the row. pgvector's default storage (EXTERNAL) moves a 384-dimension
-- vector (1,544 bytes) to the TOAST table whenever the row passes the TOAST threshold (about
-- 2 kB), which a turn with its text, excerpt and tsvector does: every distance then costs a
-- TOAST fetch (docs/performance.md). PLAIN keeps the vector inline; the row's text columns are compressed instead. Rows written before this
-- migration keep their out-of-line vectors until rewritten (VACUUM FULL facts, episode_chunks).
ALTER TABLE episode_chunks ALTER COLUMN embedding SET STORAGE PLAIN;
ALTER TABLE facts ALTER COLUMN embedding SET STORAGE PLAIN;
