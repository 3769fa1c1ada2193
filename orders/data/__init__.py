"""Data access: engines and sessions, models, replicas, shards, seed data."""
