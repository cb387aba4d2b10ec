"""What a model family is: its template, thinking toggle, parser names and quirks.

A family is plain data. The engine reads it to pick the chat template, to turn a
request's reasoning controls into template variables, and to name the vLLM
reasoning and tool-call parsers. Nothing here imports vLLM: the HTTP
side may read families too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from engine.errors import EngineRequestError

# Request-level keys that mean "the family's boolean thinking switch", whatever the
# family's own template calls it: `{"thinking": false, "enable_thinking": false}`
# turns reasoning off on every family that has such a switch.
BOOLEAN_ALIASES = ("thinking", "enable_thinking")


@dataclass(frozen=True, slots=True)
class Toggle:
    """One reasoning control a family's template reads.

    `values` empty means a boolean; otherwise the allowed strings. `top_level` names the
    request fields (besides `chat_template_kwargs[key]`) that may set it.
    """

    key: str
    default: bool | str
    values: tuple[str, ...] = ()
    top_level: tuple[str, ...] = ()
    # Only meaningful while reasoning is on (GLM's effort): not passed when it is off.
    needs_reasoning: bool = False
    # Other accepted values and the family value each means (OpenAI's reasoning_effort
    # levels on a family with fewer levels).
    aliases: tuple[tuple[str, str], ...] = ()

    @property
    def is_boolean(self) -> bool:
        return not self.values


@dataclass(frozen=True, slots=True)
class Family:
    """A model family: everything family-specific the server needs, in one record."""

    name: str  # the key users type (`--family`), the same as vLLM's parser name
    template: str  # file in templates/, without `.jinja`
    toggles: tuple[Toggle, ...] = ()
    reasoning_parser: str | None = None  # vLLM `--reasoning-parser` name
    tool_parser: str | None = None  # vLLM `--tool-call-parser` name
    # Tokens the family's tokenizer has as single vocabulary entries.
    special_tokens: tuple[str, ...] = ()
    # Binding rules: lower-case substrings of the model id, and HF config model types.
    name_patterns: tuple[str, ...] = ()
    model_types: tuple[str, ...] = ()
    # Quirk: with reasoning off, drop everything up to and including the first
    # occurrence of this marker from the content (GLM 5.x leaks its chain of thought).
    drop_leak_through: str | None = None
    # Template variables built from a request's tools, as the family's own tokenizer
    # builds them before rendering (Kimi's TypeScript `tools_ts_str`).
    template_context: Callable[[list[dict[str, Any]] | None], dict[str, Any]] | None = None
    # Lower-case name substrings of same-lineage models whose prompt format differs:
    # they are not bound to this family (their checkpoint's own template is used).
    other_versions: tuple[str, ...] = ()
    # Tokens that end the model's turn (a tool call waiting for its response included):
    # generation stops on them even when the checkpoint's generation config omits them.
    turn_ends: tuple[str, ...] = ()
    # Text that opens an assistant turn in the rendered prompt. Only what follows its
    # last occurrence (the turn being generated) tells whether reasoning already ended:
    # earlier turns, and system text quoting the markers, must not.
    assistant_start: str | None = None

    def toggle(self, key: str) -> Toggle | None:
        return next((t for t in self.toggles if t.key == key), None)

    @property
    def switch(self) -> Toggle | None:
        """The toggle that turns reasoning on and off (the first one)."""
        return self.toggles[0] if self.toggles else None

    @property
    def reasons_by_default(self) -> bool:
        switch = self.switch
        if switch is None or self.reasoning_parser is None:
            return False
        return switch.default is not False and switch.default != "disabled"

    def reasoning_on(self, settings: Mapping[str, Any]) -> bool:
        """Whether a request with these resolved `settings` may produce reasoning."""
        switch = self.switch
        if switch is None or self.reasoning_parser is None:
            return False
        value = settings.get(switch.key, switch.default)
        return value is not False and value != "disabled"


def resolve(
    family: Family, template_kwargs: Mapping[str, Any], top_level: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A request's reasoning controls -> (template variables, the family's settings).

    `template_kwargs` is the request's `chat_template_kwargs` (unknown keys pass through
    to the template untouched); `top_level` holds the request fields that were set
    (`thinking`, `enable_thinking`, `reasoning_effort`). A bad value is a 400 naming it.
    """
    if top_level.get("reasoning_effort") == "none":
        # OpenAI's "no reasoning": the family's boolean switch off, unless set explicitly.
        controls = {k: v for k, v in top_level.items() if k != "reasoning_effort"}
        controls.setdefault("thinking", False)
        top_level = controls
    settings: dict[str, Any] = {}
    for toggle in family.toggles:
        settings[toggle.key] = _value(toggle, template_kwargs, top_level)
    reasoning_on = family.reasoning_on(settings)
    for toggle in family.toggles:
        if toggle.needs_reasoning and not reasoning_on:
            del settings[toggle.key]
    variables = {k: v for k, v in template_kwargs.items() if family.toggle(k) is None}
    variables.update(settings)
    return variables, settings


def _value(
    toggle: Toggle, template_kwargs: Mapping[str, Any], top_level: Mapping[str, Any]
) -> bool | str:
    """The first place that sets the toggle wins: the template's own key, then (for a
    boolean switch) its aliases, in `chat_template_kwargs` first, then top level."""
    aliases = BOOLEAN_ALIASES if toggle.is_boolean else ()
    sources = [
        *((f"chat_template_kwargs.{k}", template_kwargs, k) for k in (toggle.key, *aliases)),
        *((k, top_level, k) for k in (toggle.key, *toggle.top_level, *aliases)),
    ]
    for param, source, key in sources:
        value = source.get(key)
        if value is not None:
            return _checked(toggle, value, param)
    return toggle.default


def _checked(toggle: Toggle, value: Any, param: str) -> bool | str:
    if toggle.is_boolean:
        if not isinstance(value, bool):
            raise EngineRequestError(f"`{param}` must be a boolean.", param=param)
        return value
    value = dict(toggle.aliases).get(value, value) if isinstance(value, str) else value
    if not isinstance(value, str) or value not in toggle.values:
        allowed = ", ".join(f"`{v}`" for v in toggle.values)
        raise EngineRequestError(f"`{param}` must be one of {allowed}.", param=param)
    return value
