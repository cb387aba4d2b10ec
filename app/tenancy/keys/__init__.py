"""API keys: their records and store, authentication (the modes and the key cache), and
each key's part of the prefix cache (isolation)."""
