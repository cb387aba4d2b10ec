"""The skeleton every generation API shares: the service base, sampling, streaming, tools,
the vLLM extensions, prompt logprobs, admission's settings, the fairness view, and the
metering of deferred lines."""
