"""Tenant data kept beyond one request: stored responses, uploaded files and batches.
It lives in the keys and usage database (SQLite or PostgreSQL), so that every replica
sharing that database reads the same data, each row scoped to the key that made it."""
