"""SmolLM2 (Hugging Face): ChatML, with SmolLM2's default system prompt when none is
given; no thinking mode. Tool calls use the hermes format (the engine's default tool
parser). The default model's family."""

from engine.families.base import Family

FAMILY = Family(
    name="smollm2",
    template="smollm2",
    special_tokens=("<|im_start|>", "<|im_end|>"),
    name_patterns=("smollm2",),
    assistant_start="<|im_start|>assistant\n",
)
