"""Opening the database: migrations are idempotent, and a database the server cannot use
(missing, read-only, locked, in a missing folder) is one clear error; `serve` exits
non-zero with it before loading anything."""

from __future__ import annotations

import sqlite3
import subprocess
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.engine import DatabaseError, alembic_config, migrate, open_database
from app.launch.cli import main
from app.tenancy.keys.store import KeyStore


async def test_migrating_again_is_a_no_op(database: AsyncEngine) -> None:

    from app.db.engine import alembic_config

    await migrate(database)
    async with database.connect() as conn:
        revision = (await conn.exec_driver_sql("SELECT version_num FROM alembic_version")).one()
    # The newest revision, a single head (the chain of migrations has no fork).
    heads = ScriptDirectory.from_config(alembic_config()).get_heads()
    assert len(heads) == 1 and revision == (heads[0],)


async def test_sqlite_is_in_wal_mode(tmp_path: Path) -> None:
    engine = await open_database(f"sqlite:///{tmp_path}/x.db")
    async with engine.connect() as conn:
        mode = (await conn.exec_driver_sql("PRAGMA journal_mode")).scalar()
    await engine.dispose()
    assert mode == "wal"


async def test_a_missing_file_when_keys_are_required(tmp_path: Path) -> None:
    with pytest.raises(DatabaseError, match="no keys database"):
        await open_database(f"sqlite:///{tmp_path}/missing.db", must_exist=True)


async def test_a_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(DatabaseError, match="does not exist"):
        await open_database(f"sqlite:///{tmp_path}/nope/x.db")


def test_a_read_only_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`serve` on a database file nobody may write (immutable: even root cannot):
    exit 2 and say so."""
    path = tmp_path / "x.db"
    url = f"sqlite:///{path}"
    assert main(["keys", "create", "--name", "x", "--database-url", url]) == 0
    subprocess.run(["chattr", "+i", str(path)], check=True)
    try:
        assert main(["serve", "--auth", "keys", "--database-url", url]) == 2
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)
    assert "not readable and writable" in capsys.readouterr().err


async def test_a_locked_file(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    (await open_database(f"sqlite:///{path}")).sync_engine.dispose()
    holder = sqlite3.connect(path)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(DatabaseError, match="locked"):
            await open_database(f"sqlite:///{path}")
    finally:
        holder.rollback()
        holder.close()


def test_serve_refuses_to_start_without_its_keys_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["serve", "--auth", "keys", "--data-dir", str(tmp_path)])
    assert code == 2
    assert "no keys database" in capsys.readouterr().err


def test_serve_refuses_a_public_address_without_keys(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--host", "0.0.0.0"]) == 2
    message = capsys.readouterr().err
    assert "--auth keys" in message and "--auth none" in message


def test_keys_cli_creates_lists_revokes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = ["--data-dir", str(tmp_path)]
    made = ["keys", "create", "--name", "carol", "--rpm", "0", "--cache-group", "team-a"]
    assert main([*made, *data]) == 0
    secret = capsys.readouterr().out.strip()
    assert secret.startswith("lilac-sk-")
    assert main(["keys", "list", "--format", "json", *data]) == 0
    listed = capsys.readouterr().out
    assert "carol" in listed and secret not in listed and '"rpm": 0' in listed
    assert '"cache_group": "team-a"' in listed
    key_id = listed.split('"id": "')[1].split('"')[0]
    assert main(["keys", "update", key_id, "--tpm", "500", *data]) == 0
    assert '"tpm": 500' in capsys.readouterr().out
    assert main(["keys", "update", key_id, "--cache-group", "none", *data]) == 0
    assert '"cache_group": null' in capsys.readouterr().out
    assert main(["keys", "revoke", key_id, *data]) == 0
    assert main(["keys", "revoke", "key_nope", *data]) == 1
    assert "no key with id" in capsys.readouterr().err


async def test_a_database_at_the_first_revision_keeps_its_rows(database: AsyncEngine) -> None:
    """Down to 0001 (the columns and tables of 0002 gone), a row written there, then up
    again: the row is kept and the new columns are empty."""
    from alembic import command
    from sqlalchemy.engine import Connection

    def to(revision: str) -> object:
        def run(connection: Connection) -> None:
            config = alembic_config()
            config.attributes["connection"] = connection
            if revision == "0001":
                command.downgrade(config, revision)
            else:
                command.upgrade(config, revision)

        return run

    async with database.begin() as conn:
        await conn.run_sync(to("0001"))
        await conn.exec_driver_sql(
            "INSERT INTO usage (request_id, model, endpoint, prompt_tokens, cached_tokens, "
            "completion_tokens, reasoning_tokens, n, outcome, duration_ms, created_at, day) "
            "VALUES ('old', 'm', '/v1/x', 1, 0, 2, 0, 1, 'completed', 1.0, 0.0, '1970-01-01')"
        )
        await conn.exec_driver_sql("INSERT INTO api_keys (id, name, key_hash, created_at) "
                                   "VALUES ('key_old', 'o', 'h', 0.0)")  # fmt: skip
    await migrate(database)
    async with database.connect() as conn:
        row = (await conn.exec_driver_sql("SELECT request_id, client_request_id FROM usage")).one()
        group = (await conn.exec_driver_sql("SELECT cache_group FROM api_keys")).scalar()
        refusals = (await conn.exec_driver_sql("SELECT count(*) FROM usage_refusals")).scalar()
    assert tuple(row) == ("old", None) and group is None and refusals == 0


async def test_the_migrations_build_exactly_the_tables_the_code_uses(
    database: AsyncEngine,
) -> None:
    """Alembic's autogenerate finds nothing to change between the migrated database and
    app.db.schema (columns, types, indexes, constraints)."""
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext
    from sqlalchemy.engine import Connection

    from app.db.schema import metadata

    def differences(connection: Connection) -> list[object]:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        return list(compare_metadata(context, metadata))

    async with database.connect() as conn:
        assert await conn.run_sync(differences) == []


async def test_keys_made_before_weights_get_weight_one(database: AsyncEngine) -> None:
    """Down to 0007 (no `weight` column), a key written there, then up again: the key
    is kept with weight 1; down again drops the column and keeps the key."""
    from alembic import command
    from sqlalchemy.engine import Connection

    def to(revision: str, down: bool) -> object:
        def run(connection: Connection) -> None:
            config = alembic_config()
            config.attributes["connection"] = connection
            (command.downgrade if down else command.upgrade)(config, revision)

        return run

    async with database.begin() as conn:
        await conn.run_sync(to("0007", down=True))
        await conn.exec_driver_sql("INSERT INTO api_keys (id, name, key_hash, created_at, "
                                   "priority) VALUES ('key_old', 'o', 'h', 0.0, 2)")  # fmt: skip
    await migrate(database)
    [record] = await KeyStore(database).list()
    assert record.id == "key_old" and record.limits.priority == 2
    assert record.limits.weight == 1.0 and isinstance(record.limits.weight, float)
    async with database.begin() as conn:
        await conn.run_sync(to("0007", down=True))
        columns = (await conn.exec_driver_sql("SELECT * FROM api_keys")).keys()
        assert "weight" not in columns and "priority" in columns
    await migrate(database)
