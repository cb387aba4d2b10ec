"""The served models from settings: `[[models]]` tables of the config file, or the one
`--model` with today's behaviour (never sleeping)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.config.model_specs import ModelSpec, engine_settings, model_specs
from app.config.settings import Settings
from app.config.sources import parse_args


def config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "lilac.toml"
    path.write_text(text)
    return str(path)


def test_one_model_without_a_config_never_sleeps() -> None:
    specs = model_specs(parse_args(["--model", "/m", "--served-model-name", "a,b"]))
    assert specs == [ModelSpec(model="/m", served_model_name=["a", "b"], keep_alive=-1.0)]


def test_models_tables_declare_several_models_with_a_300_s_keep_alive(tmp_path: Path) -> None:
    path = config(
        tmp_path,
        """
[admission]
max_concurrent = 4

[[models]]
model = "/weights/small"
served_model_name = "small"
family = "smollm2"
max_model_len = 2048
memory_gib = 1.5
pinned = true

[[models]]
model = "/weights/other"
served-model-name = ["other", "other-alias"]
keep_alive = 0
chat_template = "t.jinja"
tool_call_parser = "hermes"
""",
    )
    settings = parse_args(["--config", path])
    assert settings.max_concurrent == 4
    small, other = model_specs(settings)
    assert (small.served_names, small.family, small.max_model_len) == (("small",), "smollm2", 2048)
    assert (small.keep_alive, small.memory_gib, small.pinned) == (300.0, 1.5, True)
    assert (other.served_names, other.keep_alive, other.pinned) == (
        ("other", "other-alias"),
        0.0,
        False,
    )
    per_model = engine_settings(settings, other)
    assert (per_model.model, per_model.served_model_name, per_model.chat_template) == (
        ("/weights/other",),
        ("other", "other-alias"),
        "t.jinja",
    )
    assert per_model.max_concurrent == 4  # everything else is the server's


def test_a_single_models_table_never_sleeps_by_default(tmp_path: Path) -> None:
    path = config(tmp_path, '[[models]]\nmodel = "/m"\n')
    assert model_specs(Settings(config=path))[0].keep_alive == -1.0


def test_an_unknown_key_is_an_error_naming_it(tmp_path: Path) -> None:
    path = config(tmp_path, '[[models]]\nmodel = "/m"\n\n[[models]]\nmodle = "/n"\n')
    with pytest.raises(SystemExit, match=r"\[\[models\]\] #2: .*unknown field `modle`"):
        model_specs(Settings(config=path))


def test_a_bad_value_is_an_error_naming_the_key(tmp_path: Path) -> None:
    path = config(tmp_path, '[[models]]\nmodel = "/m"\nkeep_alive = "soon"\n')
    with pytest.raises(SystemExit, match="keep_alive"):
        model_specs(Settings(config=path))


def test_models_tables_and_model_flag_together_are_refused(tmp_path: Path) -> None:
    path = config(tmp_path, '[[models]]\nmodel = "/m"\n')
    with pytest.raises(SystemExit, match="not also --model"):
        model_specs(Settings(config=path, model=("/n",)))


def test_models_must_be_tables(tmp_path: Path) -> None:
    path = config(tmp_path, 'models = "/m"\n')
    with pytest.raises(SystemExit, match=r"\[\[models\]\] tables"):
        model_specs(Settings(config=path))


def test_repeated_model_flags_serve_each_under_its_own_id() -> None:
    settings = parse_args(["--model", "/a", "--model", "org/b", "--max-model-len", "1024"])
    assert settings.model == ("/a", "org/b")
    specs = model_specs(settings)
    assert [(s.model, s.max_model_len, s.keep_alive) for s in specs] == [
        ("/a", 1024, 300.0),
        ("org/b", 1024, 300.0),
    ]
    assert engine_settings(settings, specs[1]).model == ("org/b",)


@pytest.mark.parametrize("flag", ["--served-model-name", "--family", "--chat-template"])
def test_a_per_model_flag_with_repeated_models_is_refused(flag: str) -> None:
    settings = parse_args(["--model", "/a", "--model", "/b", flag, "x"])
    with pytest.raises(SystemExit, match=f"{flag}: applies to one model"):
        model_specs(settings)


def test_the_model_variable_is_one_model_even_with_a_comma() -> None:
    from app.config.sources import settings_from

    assert settings_from(None, {"LILAC_MODEL": "/weights/a,b"}).model == ("/weights/a,b",)
