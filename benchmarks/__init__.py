"""Benchmarks of haki_context: `python -m benchmarks.quality` measures retrieval quality."""
