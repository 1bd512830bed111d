"""torch.distributed helpers: one place that knows whether we run under torchrun.

Launch with ``torchrun --nproc_per_node N -m harness ...``. Backend: NCCL on CUDA, gloo on CPU.
Without torchrun everything degrades to a single process (rank 0 of 1).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistInfo:
    rank: int
    world: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def rank() -> int:
    """This process's rank (torchrun's ``RANK``); 0 without torchrun."""
    return int(os.environ.get("RANK", "0"))


def local_rank() -> int:
    """This process's rank on its machine (torchrun's ``LOCAL_RANK``); 0 without torchrun."""
    return int(os.environ.get("LOCAL_RANK", "0"))


def world_size() -> int:
    """The number of processes (torchrun's ``WORLD_SIZE``); 1 without torchrun."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_main() -> bool:
    """Whether this is rank 0, the process that writes records and prints."""
    return rank() == 0


def setup(device: str | None = None) -> DistInfo:
    """Initialise the process group when launched by torchrun (idempotent)."""
    world = world_size()
    want_cuda = (device or ("cuda" if torch.cuda.is_available() else "cpu")).startswith("cuda")
    if world > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if want_cuda else "gloo")
    if want_cuda:
        local = local_rank()
        torch.cuda.set_device(local)
        dev = torch.device("cuda", local)
    else:
        dev = torch.device("cpu")
    return DistInfo(rank=rank(), world=world, device=dev)


def barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
    """Sum a tensor over ranks (in place, returned); identity in a single process."""
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


def batch_seed(seed: int, index: int) -> int:
    """Seed of batch ``index``: the draws of a batch do not depend on which rank scores it."""
    return (seed * 1_000_003 + index * 7_919 + 17) % (2**63 - 1)
