"""Thin glue: GraphQL arguments to core calls, and the per-request DataLoaders."""
