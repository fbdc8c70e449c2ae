"""The server's runtime: pool, embedder and settings, admission, keys and callers, live traces, supervision."""
