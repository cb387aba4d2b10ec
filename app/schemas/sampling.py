"""Request fields shared by chat and legacy completions: sampling, penalties, vLLM extras.

The bounds here are the documented ranges; a value outside them is a 400 naming
the field, before anything reaches the engine.
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta, Struct

from app.schemas.extensions import TokenId, VLLMExtensionFields

Temperature = Annotated[float, Meta(ge=0.0, le=2.0)]
TopP = Annotated[float, Meta(gt=0.0, le=1.0)]
TopK = Annotated[int, Meta(ge=-1)]
MinP = Annotated[float, Meta(ge=0.0, le=1.0)]
Penalty = Annotated[float, Meta(ge=-2.0, le=2.0)]
RepetitionPenalty = Annotated[float, Meta(gt=0.0, le=10.0)]
Bias = Annotated[float, Meta(ge=-100.0, le=100.0)]
PositiveInt = Annotated[int, Meta(ge=1)]
Seed = Annotated[int, Meta(ge=-(2**63), le=2**63 - 1)]
StopString = Annotated[str, Meta(min_length=1)]
Stop = StopString | Annotated[list[StopString], Meta(max_length=4)]
ChoiceCount = Annotated[int, Meta(ge=1, le=128)]


# The longest `model` a request may name. A longer one names no served model: it is
# refused as one (404 `model_not_found`, as OpenAI answers any name it does not serve)
# while decoding, before it reaches a key check, a model's wake-up, a log or the usage
# table.
MAX_MODEL_CHARS = 256


class ModelNameTooLong(Exception):
    """Raised while decoding (msgspec passes it through); app.errors maps it to a 404."""

    def __init__(self, model: str) -> None:
        super().__init__(f"a model name of {len(model)} characters")
        self.model = model


def check_model_name(model: str | None) -> None:
    if model is not None and len(model) > MAX_MODEL_CHARS:
        raise ModelNameTooLong(model)


class StreamOptions(Struct):
    include_usage: bool = False
    continuous_usage_stats: bool = False  # vLLM's: not implemented (a 400 when true)


class SamplingFields(VLLMExtensionFields, kw_only=True):
    """Fields every generation endpoint takes (vLLM's extensions included)."""

    model: str
    temperature: Temperature | None = None
    top_p: TopP | None = None
    top_k: TopK | None = None
    min_p: MinP | None = None
    seed: Seed | None = None
    n: ChoiceCount = 1
    stop: Stop | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    frequency_penalty: Penalty | None = None
    presence_penalty: Penalty | None = None
    repetition_penalty: RepetitionPenalty | None = None
    # Token id (a string, as JSON object keys are) -> bias added to its logit.
    logit_bias: dict[str, Bias] | None = None
    user: str | None = None
    # Admission order (vLLM's convention): lower runs sooner; ties go to fairness.
    priority: int = 0
    # vLLM sampling extensions, sent by clients of `vllm serve` in `extra_body`.
    ignore_eos: bool = False
    min_tokens: Annotated[int, Meta(ge=0)] = 0
    stop_token_ids: list[TokenId] | None = None
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True

    def __post_init__(self) -> None:
        check_model_name(self.model)
