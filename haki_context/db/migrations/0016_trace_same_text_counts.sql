-- A trace counts the items it left out because their text was served above them
-- (SAME_TEXT_SERVED), as it counts every other reason code; traces made before count none. The
-- stats index covers the new count too, so stats still read no heap.
ALTER TABLE context_traces ADD COLUMN n_same_text_served integer NOT NULL DEFAULT 0;
DROP INDEX context_traces_stats;
CREATE INDEX context_traces_stats ON context_traces (project_id, created_at)
    INCLUDE (facts_served, episodes_served, used_tokens, total_ms, status, empty_reason,
             n_top_score, n_multi_hop, n_over_budget, n_below_floor, n_conflict_open, n_volatility_expired,
             n_cited_by_fact, n_sources_served, n_same_text_served);
