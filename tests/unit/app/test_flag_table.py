"""The flag table (app.config.settings): one declaration per setting, everything else generated."""

from __future__ import annotations

import argparse
import dataclasses

from app.config.admission import AdmissionFlags
from app.config.server import ServerFlags
from app.config.settings import Settings
from app.config.sources import OPTIONS, build_parser, settings_from
from app.config.tenants import TenantFlags
from app.services.generation.admission import policy_from
from engine.admission.policy import Policy


def test_every_settings_field_is_a_flag() -> None:
    assert [option.field for option in OPTIONS] == list(Settings.__struct_fields__)


def test_each_flag_is_declared_in_the_module_of_its_section() -> None:
    """A group module holds exactly its documentation table's flags (`config`, which
    names the file the others may come from, stays with `Settings`)."""
    groups = {ServerFlags: "server", AdmissionFlags: "admission", TenantFlags: "tenants"}
    for option in OPTIONS:
        owner = next(c for c in Settings.__mro__ if option.field in c.__annotations__)
        assert groups.get(owner, "admission") == option.section, option.field
    assert [o.field for o in OPTIONS if o.field not in TenantFlags.__struct_fields__] == ["config"]


def test_names_are_derived_from_the_field() -> None:
    for option in OPTIONS:
        assert option.flag == "--" + option.field.replace("_", "-")
        assert option.env == "LILAC_" + option.field.upper()
    assert len({option.env for option in OPTIONS}) == len(OPTIONS)


def test_toml_keys_are_the_admission_settings_without_config() -> None:
    keys = {option.toml_key for option in OPTIONS if option.toml_key}
    admission = {o.field for o in OPTIONS if o.section == "admission"} - {"config"}
    assert keys == admission


def test_defaults_are_the_settings_defaults() -> None:
    defaults = Settings()
    for option in OPTIONS:
        assert option.default == getattr(defaults, option.field)


def test_server_defaults_are_the_policy_defaults() -> None:
    """Settings take the admission defaults from Policy: one declaration for both."""
    assert policy_from(Settings()) == Policy()
    assert policy_from(settings_from(None, {})) == Policy()
    assert {f.name for f in dataclasses.fields(Policy)} >= {"grace_s", "resume_after_s"}


def test_help_names_default_and_environment_variable() -> None:
    parser = build_parser(argparse.ArgumentParser(prog="x"))
    text = " ".join(parser.format_help().split())
    for option in OPTIONS:
        assert option.flag in text
        assert f"[{option.env}]" in text
    assert "(default: 8000) [LILAC_PORT]" in text
    assert "foreign GPU utilization (%) meaning the owner is back (default: 20)" in text
