-- Keep embeddings in the row. pgvector's default storage (EXTERNAL) moves a 384-dimension
-- vector (1,544 bytes) to the TOAST table whenever the row passes ~2 kB, which a turn with
-- its text, excerpt and tsvector does: every distance then costs a TOAST fetch. Measured on
-- 2,000 LoCoMo turns: exact scan 3.5 ms -> 0.9 ms (4,532 -> 500 buffers). PLAIN keeps the
-- vector inline; the row's text columns are compressed instead. Rows written before this
-- migration keep their out-of-line vectors until rewritten (VACUUM FULL facts, episode_chunks).
ALTER TABLE episode_chunks ALTER COLUMN embedding SET STORAGE PLAIN;
ALTER TABLE facts ALTER COLUMN embedding SET STORAGE PLAIN;
