-- Key scopes and the record of each erasure.
--
-- A key may read (every query, `context` included, which writes its trace), write (every
-- mutation that records or changes memory) and erase (`forgetSubject`). Keys made before
-- scopes existed keep what they could do: read and write. Erasing is granted only on purpose
-- (`haki-context keys create --scope erase`).
ALTER TABLE api_keys
    ADD COLUMN scopes text[] NOT NULL DEFAULT '{read,write}'
        CHECK (cardinality(scopes) > 0 AND scopes <@ ARRAY['read', 'write', 'erase']);

-- One row per `forgetSubject` (or `haki-context forget`): proof that it ran, holding no content.
-- The subject is kept as SHA-256(project_id, 0x1f, subject_id), never in clear: the record must
-- not itself be the personal data it says was erased, yet an operator asked "was X erased?"
-- can answer by hashing X. `counts` is what was deleted, by kind; `key_id` the key that asked
-- (NULL for the command line and development mode, `actor` says which).
CREATE TABLE erasures (
    project_id    text NOT NULL,
    id            uuid NOT NULL,
    subject_hash  bytea NOT NULL,
    counts        jsonb NOT NULL,
    key_id        uuid,
    actor         text NOT NULL CHECK (actor IN ('key', 'development', 'operator')),
    erased_at     timestamptz NOT NULL,
    PRIMARY KEY (project_id, id)
);
CREATE INDEX erasures_subject ON erasures (project_id, subject_hash, erased_at DESC);
