"""Whether a request calls tools: one rule, read by both sides.

The HTTP side sends tools to the engine only when they may be called, and the vLLM
backend renders them into the template, constrains the output to their schemas and
parses calls out of it under the same rule: tools given and `tool_choice` not
"none". Written once so that the two sides cannot disagree.
"""

from __future__ import annotations

from collections.abc import Sized
from typing import Any


def calls_tools(tools: Sized | None, tool_choice: Any) -> bool:
    """True when the model may call one of `tools` (`tool_choice` unset means "auto")."""
    return bool(tools) and tool_choice != "none"
