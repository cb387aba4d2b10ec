"""A fixed pure-Python workload that no project change touches: the machine's yardstick.

`perf/micro/compare.py` divides every ratio by this one's, so that a machine that is busier
or slower than the one the baseline was recorded on does not read as a regression.
"""

from __future__ import annotations

import json
from typing import Any

_DATA = {f"key{i}": {"values": list(range(i % 7)), "name": f"item-{i}"} for i in range(60)}


def _workload() -> int:
    total = 0
    for i in range(400):
        total += (i * i) % 7
    text = json.dumps(_DATA)
    parts = text.split(",")
    return total + len(parts) + len({p[:4] for p in parts})


def test_calibration(benchmark: Any) -> None:
    benchmark(_workload)
