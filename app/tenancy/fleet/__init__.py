"""Limits across a fleet of replicas over one PostgreSQL database: the shared buckets and
heartbeats (limit_store), each replica's leases and rounds, and which replica serves
which model."""
