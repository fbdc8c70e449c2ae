"""The `context` pipeline: its stages, scores, packing, and the trace of each call."""
