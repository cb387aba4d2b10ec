"""vLLM's hermes tool parser, with a JSON-aware end of call.

vLLM finds the end of a `<tool_call>` by the first `</tool_call>` after it, even
inside a string argument: a model that writes `"expression": "}}</tool_call> ..."`
(measured on SmolLM2, inside a grammar that allows any string) gets its call cut
in two. Here a call ends where its JSON object closes; `</tool_call>` inside the
object's strings is just text. Everything else is vLLM's parser.
"""

from __future__ import annotations

import json
from typing import Any

from vllm.tool_parsers.hermes_tool_parser import Hermes2ProToolParser


def json_object_end(text: str, start: int) -> int | None:
    """Index just past the JSON object that starts at or after `start`; None while open."""
    depth = 0
    in_string = escaped = False
    for index in range(start, len(text)):
        char = text[index]
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return index + 1
    return None


class JsonAwareHermesParser(Hermes2ProToolParser):
    def _extract_tool_call_jsons(self, text: str) -> list[tuple[str, bool]]:
        results: list[tuple[str, bool]] = []
        position = 0
        while True:
            start = text.find(self.tool_call_start_token, position)
            if start == -1:
                return results
            body_start = start + len(self.tool_call_start_token)
            body_end = json_object_end(text, body_start)
            if body_end is None:  # still being written
                results.append((text[body_start:].strip(), False))
                return results
            results.append((text[body_start:body_end].strip(), True))
            closing = text.find(self.tool_call_end_token, body_end)
            if closing == -1:
                return results
            position = closing + len(self.tool_call_end_token)

    def extract_tool_calls(self, model_output: str, request: Any) -> Any:
        from vllm.entrypoints.generate.base.protocol import (
            ExtractedToolCallInformation,
            FunctionCall,
            ToolCall,
        )

        calls = []
        for body, complete in self._extract_tool_call_jsons(model_output):
            if not complete:
                continue
            try:
                parsed = json.loads(body)
                arguments = json.dumps(parsed["arguments"], ensure_ascii=False)
                calls.append(
                    ToolCall(
                        type="function",
                        function=FunctionCall(name=parsed["name"], arguments=arguments),
                    )
                )
            except (ValueError, KeyError, TypeError):
                continue
        if not calls:
            return ExtractedToolCallInformation(
                tools_called=False, tool_calls=[], content=model_output
            )
        content = model_output[: model_output.find(self.tool_call_start_token)]
        return ExtractedToolCallInformation(
            tools_called=True, tool_calls=calls, content=content or None
        )
