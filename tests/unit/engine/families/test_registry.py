"""The family registry: binding, defaults, and resolving a request's reasoning controls."""

import json

import pytest

from engine import families
from engine.errors import EngineRequestError


def test_names_are_the_vllm_parser_names() -> None:
    assert set(families.FAMILIES) == {"smollm2", "kimi_k2", "glm45", "gemma4", "minimax_m3"}
    for family in families.FAMILIES.values():
        assert family.reasoning_parser in (None, family.name)


def test_reasons_by_default() -> None:
    expected = {"smollm2": False, "kimi_k2": True, "glm45": True, "gemma4": False}
    for name, reasons in expected.items():
        assert families.get(name).reasons_by_default is reasons
    assert families.get("minimax_m3").reasons_by_default is True  # adaptive may think


def test_unknown_family_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match="glm45"):
        families.get("llama9")


@pytest.mark.parametrize(
    ("model", "config", "expected"),
    [
        ("/cache/SmolLM2-135M-Instruct", {"model_type": "llama"}, "smollm2"),
        ("moonshotai/Kimi-K2.6", None, "kimi_k2"),
        ("moonshotai/Kimi-K2.5", None, "kimi_k2"),
        ("zai-org/GLM-5.2", None, "glm45"),
        ("google/gemma-4-31b-it", None, "gemma4"),
        ("MiniMaxAI/MiniMax-M3", None, "minimax_m3"),
        ("/models/my-finetune", {"model_type": "gemma4_text"}, "gemma4"),
        ("/models/kimi-tune", {"model_type": "kimi_k25"}, "kimi_k2"),
        ("/models/other", {"model_type": "llama"}, None),
        # Other versions of a lineage write other prompts: no family, the checkpoint's own.
        ("zai-org/GLM-4.5-Air", None, None),
        ("zai-org/GLM-4.6", None, None),
        ("zai-org/GLM-4.7-Flash", None, None),
        ("zai-org/GLM-5", None, None),
        ("zai-org/GLM-5.1", {"model_type": "glm_moe_dsa"}, None),
        ("moonshotai/Kimi-K2-Thinking", {"model_type": "kimi_k2"}, None),
        ("MiniMaxAI/MiniMax-M2", None, None),
        ("/models/glm-tune", {"model_type": "glm4_moe"}, None),
    ],
)
def test_detect(model, config, expected) -> None:
    family = families.detect(model, config)
    assert (family.name if family else None) == expected


def test_another_version_warns_that_the_checkpoint_template_is_used(caplog) -> None:
    with caplog.at_level("WARNING", logger="engine.families"):
        assert families.detect("zai-org/GLM-4.6") is None
    assert "checkpoint's own chat template" in caplog.text and "glm45" in caplog.text


def test_for_model_reads_the_folder_config_and_the_flag_wins(tmp_path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "kimi_k25"}))
    assert families.for_model(str(tmp_path)).name == "kimi_k2"
    assert families.for_model(str(tmp_path), "gemma4").name == "gemma4"
    assert families.for_model("zai-org/GLM-4.6", "glm45").name == "glm45"


def test_defaults_fill_the_template_variables() -> None:
    variables, settings = families.resolve(families.get("glm45"), {}, {})
    assert variables == settings == {"enable_thinking": True, "reasoning_effort": "high"}


def test_unknown_template_kwargs_pass_through() -> None:
    variables, settings = families.resolve(families.get("kimi_k2"), {"custom": 1}, {})
    assert variables == {"custom": 1, "thinking": True} and settings == {"thinking": True}


def test_boolean_aliases_switch_every_boolean_family_off() -> None:
    forward = {"thinking": False, "enable_thinking": False}
    for name in ("kimi_k2", "glm45", "gemma4"):
        family = families.get(name)
        _, settings = families.resolve(family, {}, forward)
        assert family.reasoning_on(settings) is False
    # MiniMax has no boolean switch: its thinking_mode is untouched.
    _, settings = families.resolve(families.get("minimax_m3"), {}, forward)
    assert settings == {"thinking_mode": "adaptive"}


def test_template_kwargs_win_over_top_level() -> None:
    kimi = families.get("kimi_k2")
    _, settings = families.resolve(kimi, {"thinking": True}, {"thinking": False})
    assert settings == {"thinking": True}


def test_effort_only_while_thinking() -> None:
    glm = families.get("glm45")
    _, on = families.resolve(glm, {}, {"reasoning_effort": "max"})
    _, off = families.resolve(glm, {"enable_thinking": False}, {"reasoning_effort": "max"})
    assert on == {"enable_thinking": True, "reasoning_effort": "max"}
    assert off == {"enable_thinking": False}


def test_reasoning_effort_is_ignored_by_families_without_it() -> None:
    _, settings = families.resolve(families.get("kimi_k2"), {}, {"reasoning_effort": "low"})
    assert settings == {"thinking": True}


@pytest.mark.parametrize(
    ("effort", "expected"),
    [
        ("minimal", "high"),
        ("low", "high"),
        ("medium", "high"),
        ("high", "high"),
        ("xhigh", "max"),
        ("max", "max"),
    ],
)
def test_openai_efforts_map_to_glm_levels(effort: str, expected: str) -> None:
    _, settings = families.resolve(families.get("glm45"), {}, {"reasoning_effort": effort})
    assert settings == {"enable_thinking": True, "reasoning_effort": expected}


@pytest.mark.parametrize("name", ["glm45", "kimi_k2", "gemma4"])
def test_effort_none_turns_a_boolean_switch_off(name: str) -> None:
    family = families.get(name)
    _, settings = families.resolve(family, {}, {"reasoning_effort": "none"})
    assert not family.reasoning_on(settings)
    # An explicit switch wins over the effort.
    _, settings = families.resolve(
        family, {}, {"reasoning_effort": "none", "enable_thinking": True, "thinking": True}
    )
    assert family.reasoning_on(settings)


def test_effort_none_is_ignored_without_a_boolean_switch() -> None:
    family = families.get("minimax_m3")
    _, settings = families.resolve(family, {}, {"reasoning_effort": "none"})
    assert settings == {"thinking_mode": "adaptive"}


@pytest.mark.parametrize(
    ("name", "kwargs", "top", "param"),
    [
        ("kimi_k2", {"thinking": "false"}, {}, "chat_template_kwargs.thinking"),
        ("kimi_k2", {"enable_thinking": 0}, {}, "chat_template_kwargs.enable_thinking"),
        ("glm45", {}, {"reasoning_effort": "ultra"}, "reasoning_effort"),
        ("glm45", {"reasoning_effort": "HIGH"}, {}, "chat_template_kwargs.reasoning_effort"),
        (
            "gemma4",
            {"enable_thinking": None, "thinking": "yes"},
            {},
            "chat_template_kwargs.thinking",
        ),
        ("minimax_m3", {"thinking_mode": True}, {}, "chat_template_kwargs.thinking_mode"),
        ("minimax_m3", {"thinking_mode": "auto"}, {}, "chat_template_kwargs.thinking_mode"),
    ],
)
def test_bad_values_name_their_param(name, kwargs, top, param) -> None:
    with pytest.raises(EngineRequestError) as raised:
        families.resolve(families.get(name), kwargs, top)
    assert raised.value.param == param
