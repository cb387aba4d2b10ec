"""Reading the model's output: tool calls in the model's own format (tool_calls, with
hermes's JSON-aware end of call) and reasoning against content, with vLLM's parsers."""
