"""Runs a test body on N ranks under torch.multiprocessing and collects what failed."""
import tempfile
import traceback

import torch.multiprocessing as mp


def _rank(rank, body, args, init, errors):
    try:
        body(rank, init, *args)
    except Exception:
        errors.put(f"{body.__name__}{args}, rank {rank}:\n{traceback.format_exc()}")


def failures_of(body, ranks, *args):
    """body(rank, init_method, *args) on `ranks` processes; the tracebacks of those that failed."""
    with tempfile.TemporaryDirectory() as d:
        errors = mp.get_context("spawn").SimpleQueue()
        mp.spawn(_rank, args=(body, args, f"file://{d}/store", errors), nprocs=ranks, join=True)
        found = []
        while not errors.empty():
            found.append(errors.get())
    return found
