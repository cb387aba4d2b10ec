"""MiniMax M3: `]~b]user\n...[e~[` turns, reasoning in `<mm:think>...</mm:think>`.

The prompt opens with a system turn holding the model's identity and
`<thinking_instructions>` stating the mode, then a `developer` turn with the user's
system prompt and the tools (`<tool>{function}</tool>`). `thinking_mode` is `adaptive`
by default (the model decides whether to think; the generation prompt opens nothing),
`enabled` (the prompt opens `<mm:think>`) or `disabled` (the prompt writes
`</mm:think>`). Past answers without reasoning start with `</mm:think>`. Tool calls
come in `]<]minimax[>[<tool_call>...]<]minimax[>[</tool_call>`.
"""

from engine.families.base import Family, Toggle

FAMILY = Family(
    name="minimax_m3",
    template="minimax_m3",
    toggles=(
        Toggle(key="thinking_mode", default="adaptive", values=("adaptive", "enabled", "disabled")),
    ),
    reasoning_parser="minimax_m3",
    tool_parser="minimax_m3",
    special_tokens=("]~!b[", "]~b]", "[e~[", "<mm:think>", "</mm:think>", "]<]minimax[>["),
    name_patterns=("minimax-m3", "minimax_m3"),
    other_versions=("minimax-m2", "minimax_m2", "minimax-m1", "minimax-text"),
    turn_ends=("[e~[",),
    model_types=("minimax_m3", "minimax_m3_vl"),
    assistant_start="]~b]ai\n",
)
