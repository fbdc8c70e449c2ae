-- Full text by scope from one posting list: each row's lexemes, prefixed by its scope's tag.
--
-- 0006's GIN index over (project_id, subject_id, search_vector) answers "rows of this subject
-- holding this word" by intersecting three posting lists, and the project's and the subject's
-- grow with the table, so each word's lookup slows as the table grows (docs/performance.md).
-- Per-scope partial indexes were tried and dropped: every partial index of a table adds to the
-- planning time of every statement on it, so their number must not grow with the number of
-- large scopes.
--
-- Here the index key is the word *and* the scope: `haki_scoped_lexemes` turns a tsvector into
-- the same lexemes prefixed with `haki_scope_tag(project, subject)` (16 hex digits of an md5
-- of the pair, then '/'), so a scope's rows holding a word are one posting list, whatever the
-- table holds. Statements still filter on project_id and subject_id (a tag is a hash). Ranks
-- keep reading search_vector itself. Two limits of tsvector bound what is tagged: a lexeme
-- over 2,000 bytes is left out (tagged, it could pass the 2,046-byte limit of one lexeme;
-- db/retrieval.py, _TEXT_LEXEMES, searches no longer word), and
-- lexemes stop once their tagged bytes reach 1,000,000 (the limit of a whole tsvector is
-- 1 MiB, and 17 more bytes a word would push a fact of tens of thousands of distinct words past it: its
-- write would fail). Words left out can still be served by the vector branch.
CREATE FUNCTION haki_scope_tag(project_id text, subject_id text) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN left(md5(project_id || chr(31) || subject_id), 16) || '/';

CREATE FUNCTION haki_scoped_lexemes(project_id text, subject_id text, lexemes tsvector) RETURNS tsvector
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN array_to_tsvector(ARRAY(
        SELECT t.tagged FROM (
            SELECT haki_scope_tag(project_id, subject_id) || l AS tagged,
                   sum(octet_length(l) + 17) OVER (ORDER BY l) AS bytes
            FROM unnest(tsvector_to_array(lexemes)) AS l
            WHERE octet_length(l) <= 2000) t
        WHERE t.bytes <= 1000000));

CREATE INDEX facts_scoped_search ON facts USING gin (haki_scoped_lexemes(project_id, subject_id, search_vector))
    WHERE status = 'ACTIVE';
CREATE INDEX episode_chunks_scoped_search ON episode_chunks
    USING gin (haki_scoped_lexemes(project_id, subject_id, search_vector));
DROP INDEX facts_scope_search;
DROP INDEX episode_chunks_scope_search;
