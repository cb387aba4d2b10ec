"""Fair share between keys, short: two keys of weight 1 keep streams going on the
session's `keys_server` for a few seconds (perf/scenarios/fair_share.py's `equal`;
`make fair-share` measures it long, with fewer engine seats than streams). A smoke
test of the measurement and of the engine's view of the tenants, not the measurement:
the window opens once both keys have had a whole answer (a restarted server's first
steps of a new batch shape can take seconds here); both keys are served, neither
starved, their tokens counted as they came, the engine left clean."""

from __future__ import annotations

import asyncio

import pytest

from perf.scenarios.fair_share import Host, equal
from tests.e2e.conftest import ADMIN_KEY, KeysServer

pytestmark = pytest.mark.e2e
STREAMS, WARMUP_S, SECONDS = 2, 2.0, 6.0
MAX_TOKENS = 16  # short answers: several finish in the window, each checked


def test_two_equal_keys_both_get_a_fair_part(keys_server: KeysServer) -> None:
    host = Host(keys_server.url, ADMIN_KEY, keys_server.server)
    try:
        result = asyncio.run(
            equal(host, streams=STREAMS, warmup=WARMUP_S, seconds=SECONDS, max_tokens=MAX_TOKENS)
        )
    except RuntimeError as exc:  # a key without a whole answer: the server's log says why
        pytest.fail(f"{exc}\n{keys_server.server.log_tail()}")

    assert len(result.rows) == 2
    for row in result.rows:
        assert row.errors == {} and row.refused == {}, row
        # The engine's view of both keys and the server's log say why, should one get
        # nothing (every key had a whole answer before the window opened).
        assert row.output_tokens > 0, (row, result.fairness, keys_server.server.log_tail())
        assert row.finished > 0, (row, result.fairness)  # whole answers, with their usage
        # A loose bound: with every stream in the batch the engine gives each about half.
        assert row.share >= 0.25, result.rows
        # The chunks listed (nearly) every token their usage counted: the window's count
        # is the tokens' own, not an estimate.
        assert row.chunk_coverage is not None and row.chunk_coverage >= 0.9, row
    assert sum(row.share for row in result.rows) == pytest.approx(1.0, abs=1e-3)
    assert result.unfinished_after == 0  # the cancelled streams were aborted

    # The engine's fair scheduler saw both keys as tenants of weight 1, both served.
    assert result.fairness.get("fair_share") is True, result.fairness
    tenants = {t["key_id"]: t for t in result.fairness["tenants"]}
    for row in result.rows:
        tenant = tenants.get(row.key_id)
        assert tenant is not None, (row.key, result.fairness)
        assert tenant["weight"] == 1.0 and tenant["tokens"] > 0, tenant
        assert row.engine_share is not None and row.engine_share > 0, row
