"""SmolLM2 (Hugging Face): ChatML, no reasoning. The default model's family."""

from engine.families.base import Family

FAMILY = Family(
    name="smollm2",
    title="SmolLM2",
    template="smollm2",
    special_tokens=("<|im_start|>", "<|im_end|>"),
    name_patterns=("smollm2",),
    notes="ChatML with SmolLM2's default system prompt; no thinking mode.",
)
