"""The tenants' flags (the documentation's "tenants" table): API keys, limits and usage
(app.tenancy), stored responses and batches.
"""

from __future__ import annotations

from typing import Annotated

from app.config.admission import AdmissionFlags
from app.config.flag import Flag, comma_names, one_name


class TenantFlags(AdmissionFlags, kw_only=True, frozen=True):
    auth: Annotated[
        str | None,
        Flag(
            "`none`, `static` (the `--api-key`s) or `keys` (the keys database)",
            section="tenants",
            default_doc="`none` on a loopback address; `static` with `--api-key`",
        ),
    ] = None
    api_key: Annotated[
        tuple[str, ...],
        Flag(
            "a key of `--auth static`; repeatable, or comma-separated",
            section="tenants",
            default_doc="none",
            parse=comma_names,
            repeatable=True,
        ),
    ] = ()
    api_key_file: Annotated[
        str | None,
        Flag("a file of `--auth static` keys, one a line", section="tenants", default_doc="none"),
    ] = None
    database_url: Annotated[
        str | None,
        Flag(
            "keys and usage database: `sqlite:///PATH` or `postgresql://...`",
            section="tenants",
            default_doc="`sqlite:///` `lilac.db` in `--data-dir`",
        ),
    ] = None
    data_dir: Annotated[
        str,
        Flag(
            "where the server keeps its SQLite database, usage spool and the secret that "
            "seals reasoning for Responses clients (created on first use)",
            section="tenants",
        ),
    ] = "~/.local/share/lilac-serve"
    key_cache_outage_s: Annotated[
        float,
        Flag(
            "seconds a key the database confirmed keeps working from the cache while the "
            "database is unreachable; past it, and for a key not seen before, 503 "
            "`key_store_unavailable`",
            section="tenants",
        ),
    ] = 300.0
    limit_sync_interval_s: Annotated[
        float,
        Flag(
            "with `--auth keys`: seconds between a replica's rounds with the "
            "database that keep each key's limits fleet-wide (its slices of each key's "
            "requests, tokens and concurrency topped up or given back, its heartbeat "
            "renewed); a request short of its slice starts a round at once",
            section="tenants",
        ),
    ] = 0.5
    response_retention_days: Annotated[
        float,
        Flag(
            "days a stored response (`store: true`) is kept, then deleted; until then only "
            "the key that made it reads it",
            section="tenants",
        ),
    ] = 30.0
    max_stored_response_bytes: Annotated[
        int,
        Flag(
            "bytes one stored response may take (its body, input and output items); a "
            "larger one is a 400 `stored_response_too_large`",
            section="tenants",
            default_note="16 MiB",
        ),
    ] = 16 * 1024 * 1024
    max_response_chain: Annotated[
        int,
        Flag(
            "responses one `previous_response_id` chain may hold, the new one included; a "
            "longer one is a 400 `response_chain_too_long`",
            section="tenants",
        ),
    ] = 100
    max_response_chain_bytes: Annotated[
        int,
        Flag(
            "bytes of the stored input and output items one chain may carry; more is a 400 "
            "`response_chain_too_long`",
            section="tenants",
            default_note="32 MiB",
        ),
    ] = 32 * 1024 * 1024
    file_retention_days: Annotated[
        float,
        Flag(
            "days an uploaded file (or a batch's output or error file) is kept when its "
            "upload names no `expires_after`, then deleted (0: kept until deleted)",
            section="tenants",
        ),
    ] = 30.0
    batch_retention_days: Annotated[
        float,
        Flag(
            "days a batch is kept after it ended, then deleted with its lines and its "
            "output and error files (a batch not yet ended is never deleted)",
            section="tenants",
        ),
    ] = 30.0
    max_stored_bytes_per_key: Annotated[
        int,
        Flag(
            "bytes one key may keep stored: its files (batch output and error files "
            "included) and its stored responses (0: no quota); an upload past it is a 413 "
            "`storage_quota_exceeded`",
            section="tenants",
            default_note="1 GiB",
        ),
    ] = 1024 * 1024 * 1024
    max_live_batches: Annotated[
        int,
        Flag(
            "batches one key may have not yet ended (validating, running, finalizing); "
            "creating another is a 429 `too_many_batches` until one ends",
            section="tenants",
        ),
    ] = 100
    max_queued_background_per_key: Annotated[
        int,
        Flag(
            "background responses one key may have queued or in progress (0: no bound); "
            "creating another is a 429 `too_many_background_responses` until one ends or "
            "is cancelled",
            section="tenants",
        ),
    ] = 64
    max_followers_per_key: Annotated[
        int,
        Flag(
            "event streams of background responses (`stream=true`) one key may have open "
            "at once on one replica (0: no bound); another is a 429 `too_many_followers`",
            section="tenants",
        ),
    ] = 16
    max_follow_s: Annotated[
        float,
        Flag(
            "seconds one event stream of a background response stays open (0: no bound); "
            "then it ends with an `error` event `follow_timeout`, and the client reads on "
            "with `starting_after`",
            section="tenants",
        ),
    ] = 600.0
    batch_concurrency: Annotated[
        int,
        Flag(
            "batch lines one replica runs at once, at most (they also run only in "
            "capacity no interactive request is waiting for)",
            section="tenants",
        ),
    ] = 32
    batch_concurrency_beside_interactive: Annotated[
        int,
        Flag(
            "batch lines one replica keeps running while interactive requests run (the "
            "newest over this are cut when one arrives, and run again later): every line "
            "in the engine's batch slows each step of an interactive request",
            section="tenants",
        ),
    ] = 0
    batch_resume_after_s: Annotated[
        float,
        Flag(
            "seconds without an interactive request before batch lines start again beyond "
            "`--batch-concurrency-beside-interactive` (so gaps in a steady load do not let "
            "lines in and out)",
            section="tenants",
        ),
    ] = 2.0
    batch_prefill_lines: Annotated[
        int,
        Flag(
            "batch lines one replica lets wait for their first token at once (0: no "
            "bound): lines enter the engine a few at a time, the next as these are "
            "prefilled, so a batch starting or resuming never makes one long prefill step "
            "an interactive request arriving has to wait out",
            section="tenants",
        ),
    ] = 4
    batch_lease_s: Annotated[
        float,
        Flag(
            "seconds a replica's claim on a running batch line lasts unrenewed: a line "
            "of a replica that died runs again on another after this",
            section="tenants",
        ),
    ] = 60.0
    replica_id: Annotated[
        str | None,
        Flag(
            "this replica's name in batch line claims (replicas sharing a database need "
            "distinct names)",
            section="tenants",
            default_doc="host name and process id",
        ),
    ] = None
    currency: Annotated[
        str,
        Flag(
            "the currency of the models' prices and of the usage rows' cost (one per "
            "server; a label: amounts are never converted)",
            section="tenants",
        ),
    ] = "USD"
    price: Annotated[
        tuple[str, ...],
        Flag(
            "`MODEL=IN/CACHED/OUT`: a served model's price per million input, cached-input "
            "and output tokens, written at start only when the model has no price yet "
            "(with `--auth keys`); repeatable",
            section="tenants",
            default_doc="none",
            parse=one_name,
            repeatable=True,
        ),
    ] = ()
