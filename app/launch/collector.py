"""How Python's garbage collector runs while the server serves.

Once the engine is ready, what start-up built (modules, the engine, the tokenizer) is
frozen out of the collector's reach (`gc.freeze`): it lives as long as the server, and a
full collection then walks only what requests made.

The youngest generation is then collected far less often than Python's every 700
allocations. Requests make no reference cycles (their objects are freed by reference
counting; tests/unit/app/test_reference_cycles.py holds every request path to that),
so a young collection finds no garbage, yet it walks every object the requests in
flight keep alive, about 200 each (measured in-process at 64, 256 and 1,024 concurrent
requests, streamed or not). The collection comes every `threshold` allocations net of
frees, and that count peaks with what is in flight: a threshold under the peak means a
collection every time the requests in flight pile up, each walking them all. At 256
concurrent requests and a threshold of 10,000, that was 4-5 collections every 1,000
requests at about 7 ms each: 33-35 µs of a request's 250-340 µs of CPU. So the threshold
sits above what the most requests the admission controller lets in (running and
queued) can hold: `TRACKED_PER_REQUEST` for each, twice what was measured. The
collector still runs (rare cycles, from a library or a failure, are freed), just not
at every pile-up (perf/RESULTS.md, "The collector under load").

When the server stops, Python's own threshold comes back: what closes the engine's
sockets and processes may wait on objects only a collection frees.
"""

from __future__ import annotations

import gc

PYTHON_GC_THRESHOLD = gc.get_threshold()  # what the interpreter started with
TRACKED_PER_REQUEST = 400  # objects the collector tracks, per request held in the process
YOUNG_COLLECTION_MIN = 10_000


def young_collection_every(requests_held: int) -> int:
    """The youngest generation's threshold for a process that holds at most
    `requests_held` requests at once (running and queued)."""
    return max(YOUNG_COLLECTION_MIN, TRACKED_PER_REQUEST * requests_held)


def settle_for_serving(requests_held: int) -> None:
    """Start-up is over: freeze what it built, and collect the young rarely."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(young_collection_every(requests_held))


def restore() -> None:
    """The server stops: collect as Python does."""
    gc.set_threshold(*PYTHON_GC_THRESHOLD)
