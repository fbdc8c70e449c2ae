-- Context traces: one row per context call, with the per-trace counts stats read
-- (so stats never scan decisions), and one decision row per item considered.

CREATE TABLE context_traces (
    project_id            text NOT NULL,
    id                    uuid NOT NULL,
    subject_id            text NOT NULL,
    query                 text NOT NULL,
    budget_tokens         integer NOT NULL,
    used_tokens           integer NOT NULL,
    status                text NOT NULL,
    empty_reason          text,
    warnings              text[] NOT NULL,
    created_at            timestamptz NOT NULL,
    embed_ms              double precision NOT NULL,
    retrieve_ms           double precision NOT NULL,
    pack_ms               double precision NOT NULL,
    persist_ms            double precision NOT NULL,
    total_ms              double precision NOT NULL,
    facts_served          integer NOT NULL,
    episodes_served       integer NOT NULL,
    n_included            integer NOT NULL,
    n_excluded            integer NOT NULL,
    n_blocked             integer NOT NULL,
    n_top_score           integer NOT NULL,
    n_multi_hop           integer NOT NULL,
    n_over_budget         integer NOT NULL,
    n_below_floor         integer NOT NULL,
    n_conflict_open       integer NOT NULL,
    n_volatility_expired  integer NOT NULL,
    PRIMARY KEY (project_id, id)
);
CREATE INDEX context_traces_recent ON context_traces (project_id, created_at DESC, id DESC);
CREATE INDEX context_traces_scope ON context_traces (project_id, subject_id, created_at DESC, id DESC);

CREATE TABLE trace_decisions (
    project_id   text NOT NULL,
    trace_id     uuid NOT NULL,
    ord          integer NOT NULL,
    item_kind    text NOT NULL,
    item_id      uuid NOT NULL,
    chunk        integer,
    decision     text NOT NULL,
    reason_code  text NOT NULL,
    rank         integer,
    score        double precision,
    similarity   double precision,
    full_text    double precision,
    recency      double precision,
    distance     double precision,
    tokens       integer NOT NULL,
    via_entity   text,
    PRIMARY KEY (project_id, trace_id, ord)
);
