"""The family-test engine: the real `VLLMEngine` on a copy of the SmolLM2 checkpoint whose
tokenizer knows every family's markers (perf/harness/family_model.py), able to force its
output into a family's reasoning format.

SmolLM2 never writes `<think>` on its own, so vLLM's `AsyncLLM.add_request` is intercepted
(the production engine has no hook for it): while `regex` is set, the interception adds
a regex that makes the model write the family's markers around a few words, constrained
from the first token, and a logit bias so that it writes each marker as its single token
(as the real models do) rather than spelling it out. With `regex` None it only records
the prompt, and the engine is the production one: the warm-models tests serve it as
their second model. One engine serves both modules (tests/integration/conftest.py): a
start costs a minute here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine import families
from engine.vllm_backend.config import EngineConfig
from engine.vllm_backend.engine import VLLMEngine
from perf.harness.family_model import MARKERS

FAMILY_MODEL = "family-test"
FAMILY_MAX_MODEL_LEN = 1024
# The family the engine is built with: vLLM's structured-output gate keeps its reasoning
# parser whatever family a test binds afterwards.
BUILT_FAMILY = "kimi_k2"


def family_engine_config(checkpoint: Path) -> EngineConfig:
    return EngineConfig(
        model=str(checkpoint),
        served_names=(FAMILY_MODEL,),
        dtype="float32",
        enforce_eager=True,
        max_model_len=FAMILY_MAX_MODEL_LEN,
        family=BUILT_FAMILY,
    )


class ForcedOutputEngine(VLLMEngine):
    """The real engine, with the output constrained to `self.regex` when it is set."""

    regex: str | None = None
    last_prompt: str = ""

    async def start(self) -> None:
        await super().start()
        submit = self._llm.add_request

        async def add_request(
            request_id: str, prompt: dict[str, Any], params: Any, **kwargs: Any
        ) -> Any:
            ids = prompt["prompt_token_ids"]
            self.last_prompt = self._tokenizer.decode(ids, skip_special_tokens=False)
            if self.regex is not None:
                self._force(params)
                kwargs["reasoning_ended"] = True  # constrain from the first token
            return await submit(request_id, prompt, params, **kwargs)

        self._llm.add_request = add_request

    def _force(self, params: Any) -> None:
        """The reasoning markers are what is forced, each as its single token."""
        from vllm.sampling_params import StructuredOutputsParams

        params.structured_outputs = StructuredOutputsParams(regex=self.regex)
        vocab = self._tokenizer.get_vocab()
        params.logit_bias = {vocab[marker]: 30.0 for marker in MARKERS}

    def bind(self, name: str, regex: str | None) -> None:
        """Serve under family `name`'s template and parsers, the output forced to `regex`."""
        self.bind_family(families.get(name))
        self.regex = regex

    def reset(self) -> None:
        """As built: the built family, nothing forced."""
        self.bind(BUILT_FAMILY, None)
