-- The common lexemes of each large scope, with how many of its rows hold them.
--
-- The idf full-text rank needs each query word's document frequency in the scope. Counting it
-- at query time reads every row holding the word, which is slow for common words in a large
-- scope (docs/performance.md). For a scope with its own vector index (0007: a large one),
-- db/scope_lexemes.py keeps here the lexemes held by HAKI_FULL_TEXT_LEXEME_ROWS+ rows
-- (ts_stat over the scope, in the background), refreshed once the
-- scope's size has moved by a tenth; retrieval takes their df from here instead of reading
-- their rows.
CREATE TABLE scope_lexemes (
    project_id text   NOT NULL,
    subject_id text   NOT NULL,
    table_name text   NOT NULL CHECK (table_name IN ('facts', 'episode_chunks')),
    lexeme     text   NOT NULL,
    df         bigint NOT NULL,
    PRIMARY KEY (project_id, subject_id, table_name, lexeme)
);

ALTER TABLE scope_vector_indexes
    ADD COLUMN lexemes_rows   bigint,      -- the scope's size when scope_lexemes was last refreshed
    ADD COLUMN lexemes_min_df bigint,      -- the threshold it was refreshed with
    ADD COLUMN lexemes_at     timestamptz;
