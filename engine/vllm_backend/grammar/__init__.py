"""Structured decoding with xgrammar: requests' constraints (structured), the compile
deadline paid before the engine core (gate), and the pieces compiled once at start
(warmup)."""
