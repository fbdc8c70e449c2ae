"""What was asked and what it was given: trace reads, stats and pruning, replay and its diff."""
