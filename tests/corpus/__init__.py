"""The CPU-time growth check the complexity tests use (`growth`); the adversarial
request bytes they feed it are perf/harness/corpus.py (the loop-stall run sends them too)."""
