"""Checks and conversions shared by every generation endpoint."""

from __future__ import annotations

from app.errors import InvalidRequest, ModelNotFound
from app.schemas.sampling import SamplingFields
from app.services.generation.extensions import check_refused
from engine.protocol import SamplingOptions
from engine.warm.model import WarmModel
from engine.warm.pool import ModelPool


def resolve_model(models: ModelPool, name: str | None) -> WarmModel:
    """The served model a request names (without a name, the first one), else 404."""
    if name is None:
        return models.first
    model = models.get(name)
    if model is None:
        raise ModelNotFound(name)
    return model


def check_common(request: SamplingFields, max_tokens: int | None) -> None:
    """Rules that span several fields (single fields are bounded in the schema), and the
    vLLM extensions refused here."""
    check_refused(request)
    if request.stream_options is not None and not request.stream:
        raise InvalidRequest(
            "`stream_options` is only allowed when `stream` is true.", param="stream_options"
        )
    if max_tokens is not None and request.min_tokens > max_tokens:
        raise InvalidRequest(
            f"`min_tokens` ({request.min_tokens}) must not exceed the maximum number of "
            f"tokens to generate ({max_tokens}).",
            param="min_tokens",
        )


def _logit_bias(raw: dict[str, float] | None) -> dict[int, float]:
    if not raw:
        return {}
    bias = {}
    for key, value in raw.items():
        try:
            token_id = int(key)
        except ValueError:
            raise InvalidRequest(
                f"`logit_bias` keys must be token ids, got {key!r}.", param="logit_bias"
            ) from None
        if token_id < 0:
            raise InvalidRequest(f"Token id {token_id} is negative.", param="logit_bias")
        bias[token_id] = value
    return bias


def _stop_list(stop: str | list[str] | None) -> list[str]:
    if stop is None:
        return []
    return [stop] if isinstance(stop, str) else list(stop)


def sampling_options(
    request: SamplingFields,
    *,
    max_tokens: int | None,
    logprobs: int | None = None,
    prompt_logprobs: int | None = None,
) -> SamplingOptions:
    def given(value: float | int | None, default: float | int) -> float | int:
        return default if value is None else value

    return SamplingOptions(
        max_tokens=max_tokens,
        temperature=given(request.temperature, 1.0),
        top_p=given(request.top_p, 1.0),
        top_k=int(given(request.top_k, -1)),
        min_p=given(request.min_p, 0.0),
        seed=request.seed,
        stop=_stop_list(request.stop),
        stop_token_ids=list(request.stop_token_ids or ()),
        include_stop_str_in_output=request.include_stop_str_in_output,
        n=request.n,
        ignore_eos=request.ignore_eos,
        min_tokens=request.min_tokens,
        frequency_penalty=given(request.frequency_penalty, 0.0),
        presence_penalty=given(request.presence_penalty, 0.0),
        repetition_penalty=given(request.repetition_penalty, 1.0),
        logit_bias=_logit_bias(request.logit_bias),
        logprobs=logprobs,
        prompt_logprobs=prompt_logprobs,
        skip_special_tokens=request.skip_special_tokens,
        allowed_token_ids=list(request.allowed_token_ids) if request.allowed_token_ids else None,
        bad_words=list(request.bad_words or ()),
    )
