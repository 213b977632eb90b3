#!/usr/bin/env python3
"""Bad input and a dead rank under the mimatrix backend: each is a Python exception that
names the rank and the call, on every rank, within the group's timeout, never a hang; and
a group destroyed with a call's tensor just dropped ends.
Over shm, 2 ranks, under torch.multiprocessing."""
import datetime
import faulthandler
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

import mimatrix_torch  # noqa: F401  (registers the backend "mimatrix")
from spawned import failures_of

TIMEOUT_S = 10


def raises(call, *needles):
    """Runs `call`; returns the error's text, which must hold every needle."""
    try:
        call()
    except RuntimeError as e:
        text = str(e)
        missing = [n for n in needles if n not in text]
        if missing:
            raise AssertionError(f"the error lacks {missing}: {text}")
        return text
    raise AssertionError("no error")


def scenario(rank, name):
    r = rank
    if name == "dtype":  # a dtype mimatrix cannot reduce, refused on this rank, the peer told
        if r == 0:
            raises(lambda: dist.all_reduce(torch.zeros(3, dtype=torch.int16)), "rank 0", "allreduce", "Short")
        else:
            raises(lambda: dist.all_reduce(torch.zeros(3)), "rank 1", "rank 0")
    elif name == "sizes":  # tensors of different sizes on the two ranks
        raises(lambda: dist.all_reduce(torch.ones(5 + r)), f"rank {r}", "disagree")
    elif name == "op":
        raises(lambda: dist.all_reduce(torch.ones(2, dtype=torch.int32), op=dist.ReduceOp.BXOR), f"rank {r}", "BXOR")
    elif name == "dead_rank":  # rank 1 dies between DDP steps; rank 0's next step fails in time
        model = nn.parallel.DistributedDataParallel(nn.Linear(8, 4))
        for step in range(3):
            model(torch.randn(16, 8)).sum().backward()
        if r == 1:
            os._exit(0)
        began = time.monotonic()
        raises(lambda: model(torch.randn(16, 8)).sum().backward(), "rank 0")
        took = time.monotonic() - began
        if took > TIMEOUT_S + 5:
            raise AssertionError(f"rank 0 learned of the dead rank after {took:.1f} s")


def teardown(rank, init):
    """destroy_process_group right after dropping a call's tensor and Work: the group's
    finisher then drops the tensor's last reference, which takes the GIL (regression: it
    hung both ranks when the destroying thread held the GIL while joining the finisher)."""
    faulthandler.dump_traceback_later(60, exit=True)  # a C thread: it fires with the GIL held elsewhere
    for k in range(3):
        dist.init_process_group("mimatrix", init_method=f"{init}.{k}", rank=rank, world_size=2,
                                timeout=datetime.timedelta(seconds=TIMEOUT_S))
        t = torch.ones(1 << 18)
        work = dist.all_reduce(t, async_op=True)
        del t, work
        dist.destroy_process_group()
    faulthandler.cancel_dump_traceback_later()


def run(rank, init, name):
    if name == "teardown":
        return teardown(rank, init)
    dist.init_process_group("mimatrix", init_method=init, rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=TIMEOUT_S))
    scenario(rank, name)


def main():
    failures = []
    for name in ("dtype", "sizes", "op", "dead_rank", "teardown"):
        found = failures_of(run, 2, name)
        failures += found
        print(f"{name}: {'FAILED' if found else 'ok'}", flush=True)
    for f in failures:
        print(f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
