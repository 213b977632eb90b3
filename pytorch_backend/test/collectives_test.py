#!/usr/bin/env python3
"""Every c10d call the mimatrix backend serves, in real processes under
torch.multiprocessing: exact results on integer-valued tensors at world sizes 2 and 3,
over shm and tcp on loopback; and the calls it refuses say so by name. Then the group
under torchrun (env://), 4 ranks over tcp."""
import datetime
import os
import sys
import tempfile
import warnings

import torch
import torch.distributed as dist

import mimatrix_torch  # noqa: F401  (registers the backend "mimatrix")
from spawned import failures_of


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def collectives(rank, size):
    r, p = rank, size
    # allreduce of every op, several dtypes
    for dtype in (torch.float32, torch.float64, torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.int8):
        t = torch.full((5,), r + 1, dtype=dtype)
        dist.all_reduce(t)
        check(torch.equal(t, torch.full((5,), p * (p + 1) // 2, dtype=dtype)), f"all_reduce sum {dtype}: {t}")
    for op, want in ((dist.ReduceOp.MAX, p), (dist.ReduceOp.MIN, 1), (dist.ReduceOp.PRODUCT, torch.arange(1, p + 1).prod().item())):
        t = torch.full((3,), r + 1, dtype=torch.int64)
        dist.all_reduce(t, op=op)
        check(torch.equal(t, torch.full((3,), want, dtype=torch.int64)), f"all_reduce {op}: {t}")
    t = torch.full((4,), float(r + 1))
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    check(torch.allclose(t, torch.full((4,), (p + 1) / 2)), f"all_reduce AVG: {t}")
    flags = torch.tensor([r == 0, True])
    dist.all_reduce(flags, op=dist.ReduceOp.MIN)
    check(flags.tolist() == [p == 1, True], f"all_reduce MIN of bool: {flags}")
    # async, with a future
    t = torch.ones(1000)
    work = dist.all_reduce(t, async_op=True)
    fut = work.get_future()
    out = fut.wait()
    check(work.is_completed() and work.wait(), "async all_reduce completes")
    check(torch.equal(out[0], torch.full((1000,), float(p))), "the future carries the result")
    # coalesced
    a, b = torch.full((2, 3), r + 1.0), torch.full((7,), 2.0 * r)
    dist.all_reduce_coalesced([a, b])
    check(torch.equal(a, torch.full((2, 3), p * (p + 1) / 2)) and torch.equal(b, torch.full((7,), float(p * (p - 1)))),
          "all_reduce_coalesced")
    # broadcast, from every root
    for root in range(p):
        t = torch.arange(6, dtype=torch.int16) * (r + 1)  # int16: moved as bytes
        dist.broadcast(t, src=root)
        check(torch.equal(t, torch.arange(6, dtype=torch.int16) * (root + 1)), f"broadcast from {root}: {t}")
    # reduce
    for root in range(p):
        t = torch.full((3,), r + 1)
        dist.reduce(t, dst=root)
        if r == root:
            check(torch.equal(t, torch.full((3,), p * (p + 1) // 2)), f"reduce to {root}: {t}")
    # all_gather, the list form with tensors of different sizes, and the flat form
    outs = [torch.zeros(j + 1, dtype=torch.int32) for j in range(p)]
    dist.all_gather(outs, torch.full((r + 1,), r, dtype=torch.int32))
    check(all(torch.equal(outs[j], torch.full((j + 1,), j, dtype=torch.int32)) for j in range(p)), f"all_gather {outs}")
    flat = torch.zeros(2 * p)
    dist.all_gather_into_tensor(flat, torch.full((2,), float(r)))
    check(torch.equal(flat, torch.arange(p).repeat_interleave(2).float()), f"all_gather_into_tensor {flat}")
    # gather and scatter
    for root in range(p):
        gathered = [torch.zeros(2, dtype=torch.int64) for _ in range(p)] if r == root else None
        dist.gather(torch.full((2,), r * 10), gather_list=gathered, dst=root)
        if r == root:
            check(all(torch.equal(gathered[j], torch.full((2,), j * 10)) for j in range(p)), f"gather {gathered}")
        got = torch.zeros(3)
        pieces = [torch.full((3,), float(j + 100 * root)) for j in range(p)] if r == root else None
        dist.scatter(got, scatter_list=pieces, src=root)
        check(torch.equal(got, torch.full((3,), float(r + 100 * root))), f"scatter from {root}: {got}")
    # reduce_scatter, list form and flat form
    out = torch.zeros(2)
    dist.reduce_scatter(out, [torch.full((2,), float(j + r)) for j in range(p)])
    check(torch.equal(out, torch.full((2,), float(p * r + p * (p - 1) // 2))), f"reduce_scatter {out}")
    out = torch.zeros(3, dtype=torch.int64)
    dist.reduce_scatter_tensor(out, torch.arange(3 * p) + r)
    want = torch.arange(3 * r, 3 * r + 3) * p + p * (p - 1) // 2
    check(torch.equal(out, want), f"reduce_scatter_tensor {out} vs {want}")
    # all_to_all_single, equal and with split sizes (rows of 2 columns)
    out = torch.zeros(p, dtype=torch.int32)
    dist.all_to_all_single(out, torch.arange(p, dtype=torch.int32) + 100 * r)
    check(torch.equal(out, torch.arange(p, dtype=torch.int32) * 100 + r), f"all_to_all_single {out}")
    in_splits = [j + 1 for j in range(p)]              # rank r sends j+1 rows to rank j
    out_splits = [r + 1] * p                           # and gets r+1 rows from each
    inp = torch.cat([torch.full((j + 1, 2), float(10 * r + j)) for j in range(p)])
    out = torch.zeros(sum(out_splits), 2)
    dist.all_to_all_single(out, inp, out_splits, in_splits)
    want = torch.cat([torch.full((r + 1, 2), float(10 * j + r)) for j in range(p)])
    check(torch.equal(out, want), f"all_to_all_single with splits {out}")
    outs = [torch.zeros(r + 1) for _ in range(p)]
    dist.all_to_all(outs, [torch.full((j + 1,), float(r)) for j in range(p)])
    check(all(torch.equal(outs[j], torch.full((r + 1,), float(j))) for j in range(p)), f"all_to_all {outs}")
    dist.barrier()
    # torch.distributed.monitored_barrier admits Gloo only; the group's own method is c10d's call
    dist.group.WORLD.monitored_barrier(timeout=datetime.timedelta(seconds=30), wait_all_ranks=True)
    # refused by name
    for call, run in (("send", lambda: dist.send(torch.zeros(1), dst=(r + 1) % p)),
                      ("BAND", lambda: dist.all_reduce(torch.zeros(1, dtype=torch.int32), op=dist.ReduceOp.BAND))):
        try:
            run()
            raise AssertionError(f"{call} was not refused")
        except RuntimeError as e:
            check(f"rank {r}" in str(e), f"{call}: the error names the rank: {e}")


def run(rank, init, size, provider):
    os.environ["MIMATRIX_PROVIDER"] = provider
    warnings.filterwarnings("ignore", message=".*all_reduce_coalesced will be deprecated.*")
    dist.init_process_group("mimatrix", init_method=init, rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=60))
    collectives(rank, size)
    dist.destroy_process_group()


TORCHRUN_SCRIPT = """
import torch, torch.distributed as dist, mimatrix_torch
dist.init_process_group("mimatrix")  # env://, as torchrun sets it
r, p = dist.get_rank(), dist.get_world_size()
t = torch.full((4,), float(r + 1))
dist.all_reduce(t)
b = torch.tensor([r])
dist.broadcast(b, src=p - 1)
ok = torch.equal(t, torch.full((4,), p * (p + 1) / 2)) and b.item() == p - 1
print(f"RANK {r} {'OK' if ok else 'WRONG'}", flush=True)
dist.destroy_process_group()
"""


def torchrun(ranks, provider):
    """init_process_group("mimatrix") under torchrun; the failures it found."""
    import subprocess
    with tempfile.TemporaryDirectory() as d:
        script = os.path.join(d, "job.py")
        with open(script, "w") as f:
            f.write(TORCHRUN_SCRIPT)
        env = dict(os.environ, MIMATRIX_PROVIDER=provider)
        # Python 3.11's torchrun needs --redirects and --tee to keep the ranks' output.
        out = subprocess.run([sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={ranks}",
                              "--redirects", "1", "--tee", "1", script],
                             env=env, capture_output=True, text=True, timeout=300)
    oks = out.stdout.count(" OK")
    return [] if out.returncode == 0 and oks == ranks else [f"torchrun {ranks} ranks over {provider}: "
                                                            f"exit {out.returncode}, {oks} OK\n{out.stdout}{out.stderr}"]


def main():
    failures = []
    failures += torchrun(4, "tcp;ofi_rxm")
    print(f"torchrun, 4 ranks over tcp: {'ok' if not failures else 'FAILED'}", flush=True)
    for provider in ("shm", "tcp;ofi_rxm"):
        for size in (2, 3):
            found = failures_of(run, size, size, provider)
            failures += found
            print(f"{provider}, {size} ranks: {'FAILED' if found else 'ok'}", flush=True)
    for f in failures:
        print(f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
