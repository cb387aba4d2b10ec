"""Tenants: API keys, per-key limits and metered usage, on a real database (SQLite by
default, PostgreSQL for a fleet). The engine never sees a key: only the fairness
identity, the priority tier and the weight the HTTP side hands it."""
