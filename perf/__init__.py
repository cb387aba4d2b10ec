"""The benchmark suite, one entry point: `python -m perf SCENARIO [ARGS]` (perf/registry.py
names them). Grouped by kind: micro/ (micro-benchmarks and their gate), load/ (against
`vllm serve`), soak/ (soak and faults), scenarios/ (attacks, fleet, simulations...), and
harness/ (starting servers and the rest the tests share)."""
