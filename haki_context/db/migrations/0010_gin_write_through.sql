-- The scoped full-text indexes (0009) write through: no pending list.
--
-- A GIN index with fastupdate (the default) queues new rows' entries in an unsorted pending
-- list, up to gin_pending_list_limit (4 MB), and every search reads that whole list before
-- its posting list. Ingestion fills it between flushes, so a server under steady writes
-- carries up to 4 MB of it and each word a candidates statement looks up pays for reading it
-- (docs/performance.md). Written through, an
-- insert updates the posting lists at once (a few more page writes per row, off the read path).
ALTER INDEX facts_scoped_search SET (fastupdate = off);
ALTER INDEX episode_chunks_scoped_search SET (fastupdate = off);
-- Turning fastupdate off keeps what is queued until the next vacuum: flush it now.
SELECT gin_clean_pending_list('facts_scoped_search'::regclass);
SELECT gin_clean_pending_list('episode_chunks_scoped_search'::regclass);
