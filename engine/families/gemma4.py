"""Gemma 4 (Google): `<|turn>user\n...<turn|>` turns, the model's role is `model`.

Thinking is off by default, and the generation prompt then prefills an empty thought
channel. `enable_thinking: true` puts `<|think|>` and a newline at the start of the
system turn; the model then writes its reasoning in a thought channel,
`<|channel>thought\n...<channel|>`, before the answer. Tools are declared in Gemma's
notation (upper-case types, sorted keys); tool calls come in
`<|tool_call>...<tool_call|>`, and a turn that made calls ends at `<|tool_response>`.
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
    assistant_start="<|turn>model\n",
)
