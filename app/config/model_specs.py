"""The models one server serves: the `[[models]]` tables of the `--config` TOML file,
or, without them, the models of `--model` (one, with its flags, or several).

Each table is one `ModelSpec`; an unknown key is an error naming it. With several
models, `keep_alive` defaults to 300 s; a model served alone never sleeps by default
(`-1`), so a single-model server behaves as it always has.
"""

from __future__ import annotations

import tomllib

import msgspec

from app.config.settings import Settings

SEVERAL_MODELS_KEEP_ALIVE_S = 300.0


class ModelSpec(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    model: str | None = None  # a local folder or a Hugging Face id; None: the default model
    served_model_name: str | list[str] | None = None  # None: the model's id
    family: str | None = None
    max_model_len: int | None = None
    chat_template: str | None = None
    tool_call_parser: str | None = None
    # Idle seconds before the model sleeps; 0: at once; -1: never; None: the default.
    keep_alive: float | None = None
    memory_gib: float = 0.0  # counted against --memory-budget-gib while awake
    pinned: bool = False  # never sleeps

    @property
    def served_names(self) -> tuple[str, ...]:
        names = self.served_model_name
        if names is None:
            return ()
        return (names,) if isinstance(names, str) else tuple(names)


def model_specs(settings: Settings) -> list[ModelSpec]:
    """The models to serve, in order (the first is the one admission and the `vllm:`
    metrics describe)."""
    tables = _models_tables(settings.config) if settings.config else []
    if not tables and len(settings.model) > 1:
        return _repeated_models(settings)
    if not tables:
        return [
            ModelSpec(
                model=settings.model[0] if settings.model else None,
                served_model_name=list(settings.served_model_name) or None,
                family=settings.family,
                max_model_len=settings.max_model_len,
                chat_template=settings.chat_template,
                tool_call_parser=settings.tool_call_parser,
                keep_alive=-1.0,
            )
        ]
    if settings.model:
        raise SystemExit(
            f"--config {settings.config}: declares [[models]]; give every model there, "
            "not also --model"
        )
    specs = []
    for position, table in enumerate(tables):
        try:
            spec = msgspec.convert(table, ModelSpec)
        except msgspec.ValidationError as exc:
            message = f"--config {settings.config}: [[models]] #{position + 1}: {exc}"
            raise SystemExit(message) from exc
        if spec.keep_alive is None:
            keep_alive = SEVERAL_MODELS_KEEP_ALIVE_S if len(tables) > 1 else -1.0
            spec = msgspec.structs.replace(spec, keep_alive=keep_alive)
        specs.append(spec)
    return specs


# Flags that describe one model: with several `--model` flags, which one they meant is
# unclear, so they are refused there (each `[[models]]` table has its own).
PER_MODEL_FLAGS = ("served_model_name", "family", "chat_template", "tool_call_parser")


def _repeated_models(settings: Settings) -> list[ModelSpec]:
    """`--model A --model B`: each served under its own id, with the defaults of a model
    in a `[[models]]` table; `--max-model-len` applies to every one."""
    given = [name for name in PER_MODEL_FLAGS if getattr(settings, name)]
    if given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        raise SystemExit(
            f"{flags}: applies to one model; with several --model flags, declare the "
            "models in [[models]] tables of --config instead"
        )
    return [
        ModelSpec(
            model=model,
            max_model_len=settings.max_model_len,
            keep_alive=SEVERAL_MODELS_KEEP_ALIVE_S,
        )
        for model in settings.model
    ]


def engine_settings(settings: Settings, spec: ModelSpec) -> Settings:
    """The server settings with one model's own in place of the model flags."""
    return msgspec.structs.replace(
        settings,
        model=(spec.model,) if spec.model else (),
        served_model_name=spec.served_names,
        family=spec.family,
        max_model_len=spec.max_model_len,
        chat_template=spec.chat_template,
        tool_call_parser=spec.tool_call_parser,
    )


def _models_tables(path: str) -> list[dict[str, object]]:
    try:
        with open(path, "rb") as file:
            tables = tomllib.load(file).get("models", [])
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SystemExit(f"--config {path}: {exc}") from exc
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise SystemExit(f"--config {path}: `models` must be [[models]] tables")
    return [{key.replace("-", "_"): value for key, value in t.items()} for t in tables]
