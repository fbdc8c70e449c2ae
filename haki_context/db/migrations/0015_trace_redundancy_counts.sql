-- A trace counts the items it left out as said already, as it counts every other reason code:
-- the turns a served fact cites (CITED_BY_FACT) and the facts whose source turns are served
-- (SOURCES_SERVED); traces made before count none. The stats index covers the new counts too,
-- so stats still read no heap.
ALTER TABLE context_traces ADD COLUMN n_cited_by_fact integer NOT NULL DEFAULT 0,
                           ADD COLUMN n_sources_served integer NOT NULL DEFAULT 0;
DROP INDEX context_traces_stats;
CREATE INDEX context_traces_stats ON context_traces (project_id, created_at)
    INCLUDE (facts_served, episodes_served, used_tokens, total_ms, status, empty_reason,
             n_top_score, n_multi_hop, n_over_budget, n_below_floor, n_conflict_open, n_volatility_expired,
             n_cited_by_fact, n_sources_served);
