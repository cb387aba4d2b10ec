"""Gemma 4 (Google): `<|turn>user\n...<turn|>` turns, the model's role is `model`.

Thinking is off by default. `enable_thinking: true` puts the `<|think|>` control token
at the start of the system turn; the model then writes its reasoning in a thought
channel, `<|channel>thought\n...<channel|>`, before the answer. Tool calls come in
`<|tool_call>...<tool_call|>`.
"""

from engine.families.base import Family, Toggle

FAMILY = Family(
    name="gemma4",
    template="gemma4",
    toggles=(Toggle(key="enable_thinking", default=False),),
    reasoning_parser="gemma4",
    tool_parser="gemma4",
    special_tokens=(
        "<|turn>",
        "<turn|>",
        "<|think|>",
        "<|channel>",
        "<channel|>",
        "<|tool>",
        "<tool|>",
        "<|tool_call>",
        "<tool_call|>",
        "<|tool_response>",
        "<tool_response|>",
        '<|"|>',
    ),
    name_patterns=("gemma-4", "gemma4"),
    model_types=("gemma4", "gemma4_text"),
    # `<|tool_response>` ends a turn that made tool calls: the response comes from outside.
    turn_ends=("<turn|>", "<|tool_response>"),
)
