"""Chat-template rendering in a sandboxed Jinja environment.

Request content flows into templates, so rendering is sandboxed: no attribute
or file escapes. Compiled templates are cached by source text.
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache
from importlib.resources import files
from pathlib import Path
from typing import Any

from jinja2 import StrictUndefined, Template, TemplateError, Undefined
from jinja2.sandbox import ImmutableSandboxedEnvironment

from engine.errors import EngineRequestError

TEMPLATES_PACKAGE = "templates"  # the top-level templates/ folder, a package of data files


class TemplateRaised(EngineRequestError):
    """The chat template refused the conversation (its own `raise_exception`)."""


def _raise_exception(message: str) -> None:
    raise TemplateRaised(f"The chat template rejected the messages: {message}", param="messages")


def _tojson(value: Any, indent: int | None = None, ensure_ascii: bool = False, **_: Any) -> str:
    return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _environment() -> ImmutableSandboxedEnvironment:
    # As transformers renders chat templates: published ones use `{% break %}`.
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=Undefined,
        autoescape=False,
        extensions=["jinja2.ext.loopcontrols"],
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


_ENV = _environment()
_STRICT_ENV = _environment()
_STRICT_ENV.undefined = StrictUndefined


@lru_cache(maxsize=32)
def _compile(source: str) -> Template:
    return _ENV.from_string(source)


def load_template_file(name_or_path: str) -> str:
    """A template by path, or by name from the `templates` package (the templates/ folder)."""
    path = Path(name_or_path)
    if path.is_file():
        return path.read_text()
    return files(TEMPLATES_PACKAGE).joinpath(f"{name_or_path}.jinja").read_text()


def render_chat(
    source: str,
    messages: list[dict[str, Any]],
    *,
    add_generation_prompt: bool = True,
    continue_final_message: bool = False,
    special_tokens: dict[str, str] | None = None,
    template_kwargs: dict[str, Any] | None = None,
) -> str:
    """Render a conversation into the prompt text the model expects.

    `continue_final_message`: the last message (an assistant's) stays open, so that the
    model continues it: the text after its content (the end-of-turn marker) is cut, as
    Hugging Face's `apply_chat_template` and `vllm serve` do."""
    if continue_final_message:
        text = _render(source, messages, False, special_tokens, template_kwargs)
        return _open_final_message(text, messages)
    return _render(source, messages, add_generation_prompt, special_tokens, template_kwargs)


def _open_final_message(text: str, messages: list[dict[str, Any]]) -> str:
    content = messages[-1].get("content") if messages else None
    if isinstance(content, list):  # text parts: the last one ends the message
        parts = [p.get("text", "") for p in content if isinstance(p, dict)]
        content = parts[-1] if parts else None
    if not isinstance(content, str) or not content.strip():
        raise EngineRequestError(
            "`continue_final_message` needs a final message with text content.",
            param="continue_final_message",
        )
    cut = text.rfind(content.strip())
    if cut < 0:
        raise EngineRequestError(
            "The chat template does not write the final message's content verbatim, so it "
            "cannot be continued.",
            param="continue_final_message",
        )
    # Trailing whitespace of the content stays when the template kept it (as in HF).
    if text[cut : cut + len(content.lstrip())] == content:
        return text[: cut + len(content.lstrip())]
    return text[: cut + len(content.strip())]


def _render(
    source: str,
    messages: list[dict[str, Any]],
    add_generation_prompt: bool,
    special_tokens: dict[str, str] | None,
    template_kwargs: dict[str, Any] | None,
) -> str:
    context: dict[str, Any] = dict(template_kwargs or {})
    context.update(special_tokens or {})
    context["messages"] = messages
    context["add_generation_prompt"] = add_generation_prompt
    try:
        return _compile(source).render(context)
    except EngineRequestError:
        raise
    except (TemplateError, TypeError, ValueError, KeyError) as exc:
        raise EngineRequestError(
            f"The messages could not be rendered with the model's chat template: {exc}",
            param="messages",
        ) from exc
