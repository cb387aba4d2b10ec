"""Micro-benchmarks of the hot paths (pytest-benchmark, `make bench`) and their gate."""
