"""The deterministic simulator: the real replication code in a seeded, simulated world."""
