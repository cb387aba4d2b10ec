"""The load benchmark against `vllm serve` and the offline engine, and its companions."""
