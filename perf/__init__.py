"""Performance suite: micro-benchmarks, the load harness and the frontend ceiling."""
