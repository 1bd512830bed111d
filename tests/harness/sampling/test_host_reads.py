"""Host reads inside the sampling loop: each tensor value read back to the host (``bool(t)``,
``t.item()``, ``t.tolist()``, ...) is a device synchronisation on a GPU. They are counted on any device
by :class:`harness.bench.measure.HostReads`, per step (the difference of two runs), and pinned here so
that a change cannot add one unnoticed."""

from __future__ import annotations

import pytest
import torch

from harness.bench.measure import HostReads, host_reads_per_step
from harness.models import build_model
from harness.sampling import generate

#: (family, draw) -> reads per ancestral step: the sampler's one read of what the step does, the draw's one
#: read of its checks, and (MDLM's SUBS) the one read of which tokens are carried over
PINNED = {("mdlm", "two-stage"): 3, ("masked", "two-stage"): 3, ("mdlm", "joint"): 5, ("prime", "two-stage"): 5}


def test_host_reads_are_counted():
    x = torch.arange(4.0)
    with HostReads() as reads:
        bool(x.any())
        x.tolist()
        float(x[0])
        (x + 1).sum()  # arithmetic stays on the device
    assert reads.count == 3


@pytest.mark.parametrize(("family", "draw"), sorted(PINNED))
def test_reads_per_ancestral_step_stay_pinned(family, draw):
    model = build_model(family, vocab_size=50, seq_len=32, d_model=32, n_layers=1, n_heads=2).eval()

    def run(T):
        generate(model, "ancestral", num_samples=2, batch_size=2, generator=0, steps=T, draw=draw)

    assert host_reads_per_step(run, (8, 16)) <= PINNED[family, draw]
