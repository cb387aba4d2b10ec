"""One typed settings object, from command-line flags, environment variables, an optional
TOML file and defaults.

`Settings` is the one flag table: each field declares, once, its type, its default (the
field's own; the admission controller's come from `engine.admission.policy.Policy`) and,
in its `Flag` annotation (`app.config.flag`), its help text and where it is documented.
The fields are declared a group a documentation table: `app.config.server`,
`app.config.admission`, `app.config.tenants`; msgspec Structs take fields from one
base only, so the groups stack, each subclassing the one before, in the order the
tables and `--help` list them, and `Settings` subclasses the last. Everything else is
generated from it: the `--some-flag` option of the command line, the `LILAC_SOME_FLAG`
environment variable, the `some_flag` key of the `--config` TOML file's `[admission]`
table (admission settings only) and the documentation's flag tables
(`markdown_table`, rendered by docs/hooks/generated.py and checked by
tests/unit/app/test_readme_flags.py): that generation lives
in `app.config.sources`.

A flag given on the command line wins over the environment, which wins over the TOML
file, which wins over the defaults.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Annotated

from app.config.flag import Flag
from app.config.tenants import TenantFlags

ENV_PREFIX = "LILAC_"
SECTIONS = {"server": "server", "admission": "admission controller", "tenants": "tenants"}


class Settings(TenantFlags, kw_only=True, frozen=True):
    config: Annotated[
        str | None,
        Flag(
            "TOML file; its `[admission]` table sets any flag above (below env and flags), "
            "its `[[models]]` tables declare the served models",
            section="admission",
            default_doc="none",
        ),
    ] = None

    @property
    def on_gpu(self) -> bool:
        return has_nvidia_gpu()

    def resolved_admin_key(self) -> str | None:
        """The admin key: `admin_key`, else the first line of `admin_key_file`."""
        if self.admin_key:
            return self.admin_key
        if not self.admin_key_file:
            return None
        try:
            with open(self.admin_key_file, encoding="utf-8") as file:
                key = file.readline().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise SystemExit(f"--admin-key-file {self.admin_key_file}: {exc}") from exc
        if not key:
            raise SystemExit(f"--admin-key-file {self.admin_key_file}: the file is empty")
        return key


def has_nvidia_gpu() -> bool:
    return Path("/dev/nvidia0").exists() or shutil.which("nvidia-smi") is not None
