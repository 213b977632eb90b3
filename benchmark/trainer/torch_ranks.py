# The ranks of pytorch_ddp.py and torch_allreduce_perf.py: spawned processes on this machine,
# a process group of either backend over a file:// store, rank 0's result back to the caller.
"""Spawn N ranks of a function under torch.distributed and return what rank 0 reports."""

import datetime
import os
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

BACKENDS = ("gloo", "mimatrix")


def _rank(rank, fn, ranks, backend, folder, args):
    if backend == "mimatrix":
        import mimatrix_torch  # noqa: F401  (registers the backend)
    dist.init_process_group(backend, init_method=f"file://{folder}/store", rank=rank,
                            world_size=ranks, timeout=datetime.timedelta(seconds=120))
    result = fn(rank, *args)
    # mimatrix's group joins its finisher thread holding the GIL; if that thread still holds
    # the last call's tensors, freeing them wants the GIL: a deadlock. After a barrier it
    # holds only the barrier's bytes.
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:  # a file, not a queue: a pipe blocks a large result until it is read
        torch.save(result, os.path.join(folder, "result.pt"))


def spawn(fn, ranks, backend, *args):
    """fn(rank, *args) on `ranks` processes in one group of `backend`; rank 0's return value.

    fn runs after the group is made and before it is destroyed."""
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(_rank, args=(fn, ranks, backend, d, args), nprocs=ranks)
        return torch.load(os.path.join(d, "result.pt"))
