-- A scope index's name is unique within its project, the key every unique constraint of a
-- tenant's table leads with: a table distributed by project_id (Citus) allows no other. The
-- name is a hash of the scope, and PostgreSQL's catalog keeps index names unique anyway.
ALTER TABLE scope_vector_indexes DROP CONSTRAINT scope_vector_indexes_index_name_key;
ALTER TABLE scope_vector_indexes
    ADD CONSTRAINT scope_vector_indexes_index_name_key UNIQUE (project_id, index_name);
