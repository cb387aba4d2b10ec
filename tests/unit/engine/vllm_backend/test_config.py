"""The family's reasoning parser reaches vLLM's structured-output config."""

import json

from engine.vllm_backend.config import EngineConfig, engine_args


def test_reasoning_parser_follows_the_family(tmp_path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert engine_args(EngineConfig(str(tmp_path), ("m",))).reasoning_parser == ""
    config = EngineConfig(str(tmp_path), ("m",), family="glm45")
    assert engine_args(config).reasoning_parser == "glm45"
