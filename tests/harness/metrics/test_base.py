"""The metric base: float64 states, reset, and one distributed reduce (two gloo ranks)."""

from __future__ import annotations

import math
import os

import pytest
import torch

from harness.metrics.base import Accumulator
from harness.metrics.entropy import MeanEntropy
from harness.metrics.genppl import GenPPL
from harness.metrics.nll import NLLAccumulator
from harness.nll import NLL


class _Moments(Accumulator):
    def __init__(self) -> None:
        super().__init__()
        self.add_state("n", 0.0)
        self.add_state("sum", torch.zeros(2))
        self.add_state("items", [], dist_reduce_fx="cat")

    def update(self, x: torch.Tensor) -> None:
        self.n += x.shape[0]
        self.sum += x.sum(0)
        self.items.extend(x[:, 0].tolist())

    def compute(self) -> torch.Tensor:
        return self.sum / self.n


def test_states_are_float64_and_reset_restores_defaults():
    m = _Moments()
    assert m.n.dtype == m.sum.dtype == torch.float64 and m.sum.shape == (2,)
    m.update(torch.ones(3, 2))
    assert float(m.n) == 3 and m.items == [1.0, 1.0, 1.0]
    assert m.state().tolist() == [3.0, 3.0, 3.0]  # n, then sum: declaration order
    m.reset()
    assert float(m.n) == 0 and m.sum.tolist() == [0.0, 0.0] and m.items == []
    m.update(torch.ones(1, 2))
    m2 = _Moments()
    assert float(m2.n) == 0  # defaults are copied, never shared


def test_load_state_round_trips_and_checks_the_length():
    m = _Moments()
    m.update(torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
    other = _Moments()
    other.load_state(m.state() * 2)
    assert other.state().tolist() == [4.0, 8.0, 12.0]
    with pytest.raises(ValueError, match="4 entries"):
        other.load_state(torch.zeros(4))


def test_bad_state_declarations():
    m = Accumulator()
    with pytest.raises(ValueError, match="dist_reduce_fx"):
        m.add_state("x", 0.0, dist_reduce_fx="mean")
    with pytest.raises(ValueError, match="empty list"):
        m.add_state("x", [1.0], dist_reduce_fx="cat")


def test_all_reduce_is_a_no_op_in_one_process():
    m = _Moments()
    m.update(torch.ones(2, 2))
    m.all_reduce()
    assert float(m.n) == 2 and m.items == [1.0, 1.0]


def _nll_batch(i: int) -> NLL:
    g = torch.Generator().manual_seed(i)
    nats = torch.rand(3, generator=g, dtype=torch.float64) * 50
    tokens = torch.full((3,), 16.0, dtype=torch.float64)
    return NLL(nats=nats, tokens=tokens, kind="bound", stderr=torch.full((3,), float("nan"), dtype=torch.float64))


def _ids(i: int) -> torch.Tensor:
    return torch.randint(0, 7, (4, 12), generator=torch.Generator().manual_seed(100 + i))


def _metrics():
    return MeanEntropy(), NLLAccumulator(), GenPPL(), _Moments()


def _feed(metrics, i: int) -> None:
    ent, nll, gen, mom = metrics
    ent.update(_ids(i))
    nll.update(_nll_batch(i))
    gen.add(torch.tensor([float(i) + 1.5]), torch.tensor([float(i) + 3.0]))
    mom.update(torch.full((2, 2), float(i)))


def _rank_main(rank: int, world: int, init_file: str, out: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        os.environ["WORLD_SIZE"] = str(world)
        metrics = _metrics()
        _feed(metrics, rank)
        for m in metrics:
            m.all_reduce()
        ent, nll, gen, mom = metrics
        torch.save(
            {
                "entropy": ent.compute(),
                "nll": nll.compute(),
                "gen": gen.compute(),
                "items": mom.items,
                "n": float(mom.n),
            },
            f"{out}.{rank}",
        )
    finally:
        dist.destroy_process_group()


def test_all_reduce_over_two_ranks_equals_one_process(tmp_path):
    import torch.multiprocessing as mp

    out = str(tmp_path / "result")
    mp.spawn(_rank_main, args=(2, str(tmp_path / "init"), out), nprocs=2, join=True)
    single = _metrics()
    for i in range(2):
        _feed(single, i)
    ent, nll, gen, mom = single
    for rank in range(2):
        got = torch.load(f"{out}.{rank}", weights_only=False)
        assert got["entropy"] == ent.compute()
        assert got["nll"] == nll.compute()  # float64 sums of two terms: bit-identical
        assert got["nll"].stderr_method == "between-sequence" and got["nll"].sequences == 6
        assert got["gen"] == gen.compute() and math.isfinite(got["gen"].stderr)
        assert got["items"] == [0.0, 0.0, 1.0, 1.0] and got["n"] == 4.0
