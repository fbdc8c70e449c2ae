"""The embedder, the shipped graph's build, and the embedding space of a database."""
