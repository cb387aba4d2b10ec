"""What the benchmarks and the tests share: starting servers, ports, SSE, corpus, results."""
