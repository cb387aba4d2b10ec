import pytest

from engine.errors import EngineRequestError
from engine.templates import render_chat

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_renders_messages_and_generation_prompt() -> None:
    text = render_chat(CHATML, [{"role": "user", "content": "hi"}])
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_template_kwargs_reach_the_template() -> None:
    source = "{% if flag %}on{% else %}off{% endif %}"
    assert render_chat(source, [], template_kwargs={"flag": True}) == "on"
    assert render_chat(source, []) == "off"


def test_raise_exception_is_a_request_error() -> None:
    source = "{{ raise_exception('only user turns') }}"
    with pytest.raises(EngineRequestError, match="only user turns"):
        render_chat(source, [])


def test_sandbox_blocks_attribute_escapes() -> None:
    source = "{{ messages.__class__.__mro__ }}"
    with pytest.raises(EngineRequestError):
        render_chat(source, [{"role": "user", "content": "x"}])


def test_content_is_not_evaluated_as_template() -> None:
    text = render_chat(CHATML, [{"role": "user", "content": "{{ 7 * 7 }}"}])
    assert "{{ 7 * 7 }}" in text and "49" not in text
