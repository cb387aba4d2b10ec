"""The decisions every engine shares (engine.checks): readiness, image input, and the
context budget, each decided the same way for the scripted and the vLLM engine."""

from __future__ import annotations

import pytest

from engine.checks import default_output_tokens, output_budget, require_image_input, require_ready
from engine.errors import ContextLengthExceeded, EngineRequestError, EngineUnavailable
from engine.protocol import ModelInfo
from engine.scripted import ScriptedEngine


def test_a_host_that_is_not_ready_is_unavailable() -> None:
    with pytest.raises(EngineUnavailable):
        require_ready(ScriptedEngine(ready=False))
    require_ready(ScriptedEngine())


def test_image_input_needs_a_vision_model() -> None:
    model = ModelInfo(("m",), 100, 0, "m")
    with pytest.raises(EngineRequestError) as refused:
        require_image_input(model, "messages[0].content[1]", " (there)")
    assert (refused.value.param, refused.value.code) == (
        "messages[0].content[1]",
        "image_input_not_supported",
    )
    assert refused.value.message == "The model `m` does not accept image input (there)."
    require_image_input(ModelInfo(("m",), 100, 0, "m", supports_vision=True))


@pytest.mark.parametrize(
    ("prompt", "requested", "budget"),
    [(10, None, 25), (10, 90, 90), (10, 1, 1), (99, None, 1), (80, None, 20)],
)
def test_the_budget_is_the_request_or_the_model_default_within_the_context(
    prompt: int, requested: int | None, budget: int
) -> None:
    assert output_budget(prompt, requested, 100) == budget


def test_the_default_output_budget_depends_on_the_model() -> None:
    assert default_output_tokens(2048) == 512
    assert default_output_tokens(8192) == 2048
    assert default_output_tokens(131072) == 4096  # capped: long contexts are for prompts
    assert default_output_tokens(2) == 1


@pytest.mark.parametrize(
    ("prompt", "requested", "param"), [(100, None, "messages"), (10, 91, "max_tokens")]
)
def test_what_does_not_fit_is_context_length_exceeded(
    prompt: int, requested: int | None, param: str
) -> None:
    with pytest.raises(ContextLengthExceeded) as exceeded:
        output_budget(prompt, requested, 100)
    assert exceeded.value.param == param
