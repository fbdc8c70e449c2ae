-- Stats read every trace of a window: a covering index lets them read it without the heap.
CREATE INDEX context_traces_stats ON context_traces (project_id, created_at)
    INCLUDE (facts_served, episodes_served, used_tokens, total_ms, status, empty_reason,
             n_top_score, n_multi_hop, n_over_budget, n_below_floor, n_conflict_open, n_volatility_expired);
-- Retention deletes by age across projects.
CREATE INDEX context_traces_age ON context_traces (created_at);
