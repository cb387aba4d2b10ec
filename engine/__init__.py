"""The model side of lilac-serve, behind a narrow protocol (`engine.protocol`).

Three concerns, one package each:

- the model-independent core, here: the engine protocol and its request/output
  types, errors, model families (`engine.families`), chat-template rendering,
  JSON-schema bounds, stream merging, the scripted engine and the default
  checkpoint's preparation;
- `engine.admission`: the idle-GPU admission controller;
- `engine.vllm_backend`: the Engine implemented with vLLM, the only package that
  imports vLLM.

May import: the standard library, jinja2, and (in `engine.vllm_backend` only)
vLLM. Never imports `app`.
"""
