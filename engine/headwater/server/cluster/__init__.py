"""Routes between servers of a cluster, in nats-server's route protocol (docs/CLUSTERING.md)."""
