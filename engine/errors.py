"""Errors the engine raises; the HTTP side maps each to one status in `app.errors`."""

from __future__ import annotations


class EngineError(Exception):
    """Base class: the engine could not serve the request."""


class EngineRequestError(EngineError):
    """The request is invalid for this model (the client's fault)."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code


class ContextLengthExceeded(EngineRequestError):
    """`at_least`: the prompt was not tokenized (engine.prompt_bound), `prompt_tokens` is
    the fewest tokens its length allows."""

    def __init__(
        self,
        prompt_tokens: int,
        requested_output: int | None,
        max_model_len: int,
        at_least: bool = False,
    ) -> None:
        if at_least:
            message = (
                f"This model's maximum context length is {max_model_len} tokens, and the "
                f"prompt is too long to fit: it has at least {prompt_tokens} tokens. Please "
                f"reduce the prompt."
            )
            param = "messages"
        elif requested_output is None:
            message = (
                f"This model's maximum context length is {max_model_len} tokens, and the "
                f"prompt has {prompt_tokens} tokens, which leaves no room for output."
            )
            param = "messages"
        else:
            message = (
                f"This model's maximum context length is {max_model_len} tokens. However, you "
                f"requested {prompt_tokens + requested_output} tokens ({prompt_tokens} in the "
                f"prompt, {requested_output} for the completion). Please reduce the prompt "
                f"or the completion length."
            )
            param = "max_tokens"
        super().__init__(message, param=param, code="context_length_exceeded")
        self.prompt_tokens = prompt_tokens
        self.requested_output = requested_output
        self.max_model_len = max_model_len
        self.at_least = at_least


class EngineUnavailable(EngineError):
    """The engine is not ready (starting, or stopped)."""


class EngineFailure(EngineError):
    """The engine broke while generating; details are logged, not sent."""


class ModelWakeFailed(EngineError):
    """A sleeping model could not be woken (no room in the memory budget, or the wake
    itself failed); the model stays listed, asleep, and a later request may wake it."""

    def __init__(self, message: str, retry_after_s: float = 5.0) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after_s = retry_after_s


class WakeLimited(EngineError):
    """The client has started as many wakes of sleeping models as it may for now
    (engine.warm.wakes); the model stays asleep."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after_s = retry_after_s


class AwakeElsewhere(EngineError):
    """The first attempt of a request at a model asleep here, refused so that a router
    retries it on a box where the model is awake (engine.warm.elsewhere)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ModelStateConflict(EngineError):
    """An operator's sleep or wake the model's state refuses (pinned, busy, yielded)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class AdmissionRejected(EngineError):
    """No admission now: the client sees `status` with Retry-After."""

    def __init__(self, status: int, code: str, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.retry_after_s = retry_after_s


class Drained(EngineError):
    """An admitted request was ended because the GPU is being handed back."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after_s = retry_after_s


class NeverFits(EngineRequestError):
    """A request that needs more KV tokens than the whole budget: it could never run."""

    def __init__(self, tokens: int, budget: int) -> None:
        super().__init__(
            f"This request may need about {tokens} tokens of KV cache (prompt plus `n` "
            f"times `max_tokens`), more than the server can ever hold ({budget}); lower "
            "`max_tokens` or `n`, or shorten the prompt.",
            param="max_tokens",
            code="request_too_large",
        )
