"""vLLM's CPU worker with seeded sampling that survives chunked prefill.

When a step prefills only part of a prompt, vLLM's model runner still samples a token
for that request, discards it, and rewinds the request's seeded generator so the next
step draws the same random numbers again: `gen.set_offset(gen.get_offset() - 4)` in
`GPUModelRunner._bookkeeping_sync`. That is a Philox (CUDA) offset; the CPU generator
(Mersenne Twister) has none and raises "CPU Generator does not use offset", which kills
the engine core. The CPU generator's whole state can be saved and restored, though, so
this runner saves the state of every request whose token will be discarded before the
sampler draws, restores it right after, and hides the generators from the offset rewind.
The effect is the rewind's own: a discarded draw leaves no trace in the random stream,
so a seed samples the same text whether or not its prompt was split across steps.

The engine core builds its worker from `--worker-cls` (a qualified name it imports in
its own process), so naming this class there is all the wiring needed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from vllm.v1.worker.cpu_model_runner import CPUModelRunner
from vllm.v1.worker.cpu_worker import CPUWorker


class SeedSafeCPUModelRunner(CPUModelRunner):
    """CPUModelRunner whose discarded draws restore the generator state (see module)."""

    def _discarded_generators(self) -> list[torch.Generator]:
        """Seeded generators of the requests whose sampled token this step discards
        (a prompt not yet fully prefilled): vLLM sets the mask before sampling."""
        num_reqs = self.input_batch.num_reqs
        rows = np.nonzero(self.discard_request_mask.np[:num_reqs])[0]
        generators = self.input_batch.generators
        return [gen for i in rows if (gen := generators.get(int(i))) is not None]

    def _sample(self, logits: Any, spec_decode_metadata: Any) -> Any:
        saved = [(gen, gen.get_state()) for gen in self._discarded_generators()]
        try:
            return super()._sample(logits, spec_decode_metadata)
        finally:
            for gen, state in saved:
                gen.set_state(state)

    def _bookkeeping_sync(self, *args: Any, **kwargs: Any) -> Any:
        # The states are already back where they were before the discarded draw; with
        # no generators in view, the parent's offset rewind has nothing to do. Nothing
        # else in the bookkeeping reads them (sampling already took its own reference).
        generators = self.input_batch.generators
        self.input_batch.generators = {}
        try:
            return super()._bookkeeping_sync(*args, **kwargs)
        finally:
            self.input_batch.generators = generators


class SeedSafeCPUWorker(CPUWorker):
    """vLLM's CPU worker, its (V1) model runner swapped for SeedSafeCPUModelRunner."""

    def init_device(self) -> None:
        super().init_device()
        # Same object, one subclass down: only the two methods above change. The V2
        # runner keeps its own class (it does not rewind through offsets).
        if type(self.model_runner) is CPUModelRunner:
            self.model_runner.__class__ = SeedSafeCPUModelRunner
