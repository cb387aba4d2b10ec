"""The Engine implemented with vLLM's AsyncLLM: every module that imports vLLM.

- `engine`: the AsyncLLM adapter; `config`: building it from the settings;
- `outputs`: vLLM outputs -> engine deltas; `logprobs`: vLLM's logprob dictionaries;
- `sampling`: SamplingOptions -> SamplingParams; `structured`: response_format ->
  xgrammar constraints;
- `reasoning`: splitting reasoning from content with vLLM's reasoning parsers;
- `tool_calls`, `hermes`: tool-call grammars and parsing (vLLM's tool parsers, with
  a JSON-aware end of call for hermes).

May import: vLLM, and `engine`'s core. Nothing outside this package imports vLLM.
"""
