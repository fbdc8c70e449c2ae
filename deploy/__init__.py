"""Ways to run haki-context's database: deploy/patroni (a Patroni cluster for failover)."""
