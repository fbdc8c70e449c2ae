-- Which embedding space the stored vectors belong to: a server with another embedder refuses
-- to start (vectors of two spaces must never mix); `haki-context reembed` switches a database.
CREATE TABLE server_meta (
    key    text PRIMARY KEY,
    value  text NOT NULL
);
