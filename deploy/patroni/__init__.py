"""A local three-node Patroni cluster for haki-context (cluster.py; README.md)."""
