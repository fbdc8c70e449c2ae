"""Storage: the asyncpg pool, embedded PostgreSQL, migrations and every SQL statement."""
