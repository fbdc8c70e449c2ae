-- When each background job last ran, on any server process of this database. A pass is
-- claimed here before it runs, so it runs once per interval however many processes (workers,
-- machines) serve the database.
CREATE TABLE background_job_runs (
    job text PRIMARY KEY,
    ran_at timestamptz NOT NULL,
    ran_by text NOT NULL
);
