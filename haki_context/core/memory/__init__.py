"""The write path and the reads of memory: events, facts, conflicts, reads, forgetting, export and import."""
