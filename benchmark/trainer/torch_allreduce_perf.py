#!/usr/bin/python3
# torch.distributed.all_reduce over Gloo and mimatrix in one run, beside the library's own
# allreduce_perf, so the c10d binding's cost a call shows (issue 55).
"""float32 allreduce sweep through torch.distributed, Gloo against mimatrix, with allreduce_perf."""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.distributed as dist

import torch_ranks

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def sizes(a):
    """-b, -b*f, ... up to -e, and -e itself (8 B by 4 ends at 32 MiB, short of 64)."""
    out = [a.min_bytes]
    while out[-1] * a.factor <= a.max_bytes:
        out.append(out[-1] * a.factor)
    return out if out[-1] == a.max_bytes else out + [a.max_bytes]


def iterations(a, size):
    # Fewer calls at large sizes keep a run short on a shared machine.
    return max(3, min(a.iters, a.budget // size))


def rank_main(rank, a, backend):
    times = []
    for size in sizes(a):
        t = torch.full((size // 4,), float(rank + 1))
        dist.all_reduce(t)
        if not torch.equal(t, torch.full_like(t, a.ranks * (a.ranks + 1) / 2)):
            raise RuntimeError(f"rank {rank}: {backend} all_reduce of {size} B is wrong")
        for _ in range(a.warmup):
            dist.all_reduce(t)
        dist.barrier()
        n = iterations(a, size)
        t0 = time.perf_counter()
        for _ in range(n):
            dist.all_reduce(t)
        times.append((time.perf_counter() - t0) / n)
    mean = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(mean)  # the mean over ranks, as allreduce_perf's -a 1
    return (mean / a.ranks).tolist()


def torch_sweep(a, backend):
    return torch_ranks.spawn(rank_main, a.ranks, backend, a, backend)


def perf_sweep(a):
    """allreduce_perf's in-place time (torch's all_reduce is in place), a run per size so
    each size gets the same calls as above; None where the build has no allreduce_perf."""
    perf = os.path.join(a.build, "benchmark/perf/allreduce_perf")
    launcher = os.path.join(a.build, "examples/mimatrix-run/mimatrix-run")
    if not os.access(perf, os.X_OK) or not os.access(launcher, os.X_OK):
        print(f"# no allreduce_perf or mimatrix-run under {a.build}: its column is left out")
        return [None] * len(sizes(a))
    out = []
    with tempfile.TemporaryDirectory() as d:
        report = os.path.join(d, "perf.json")
        for size in sizes(a):
            subprocess.run([launcher, "-n", str(a.ranks), perf, "--ranks", str(a.ranks),
                            "-b", str(size), "-e", str(size), "-n", str(iterations(a, size)),
                            "-w", str(a.warmup), "-J", report],
                           check=True, stdout=subprocess.DEVNULL)
            with open(report) as f:
                out.append(json.load(f)["results"][0]["in_place"]["time"] * 1e-6)
    return out


def report(a, gloo, mm, perf):
    bus = 2 * (a.ranks - 1) / a.ranks

    def cols(seconds, size):
        algbw = size / seconds / 1e9
        return f"{seconds * 1e6:10.2f} {algbw:7.3f} {algbw * bus:7.3f}"
    print(f"# float32 sum, {a.ranks} ranks, in place; time is the mean over ranks, median of "
          f"{a.repeat} run(s); "
          "ratio = gloo time / mimatrix time; overhead = mimatrix through torch - allreduce_perf")
    print(f"# {'':24}{'gloo':>26} {'mimatrix (torch)':>26}  {'':6} {'allreduce_perf':>14}")
    print(f"# {'size':>10} {'count':>11} " + 2 * f"{'time':>10} {'algbw':>7} {'busbw':>7} "
          + f"{'ratio':>6} {'time':>10} {'overhead':>9}")
    print(f"# {'(B)':>10} {'(elements)':>11} " + 2 * f"{'(us)':>10} {'(GB/s)':>7} {'(GB/s)':>7} "
          + f"{'':>6} {'(us)':>10} {'(us)':>9}")
    for size, g, m, p in zip(sizes(a), gloo, mm, perf):
        tail = f"{p * 1e6:10.2f} {(m - p) * 1e6:9.2f}" if p is not None else f"{'n/a':>10} {'n/a':>9}"
        print(f"  {size:10d} {size // 4:11d} {cols(g, size)} {cols(m, size)} {g / m:6.2f} {tail}")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("-b", "--min-bytes", type=parse_size, default=8)
    p.add_argument("-e", "--max-bytes", type=parse_size, default=64 << 20)
    p.add_argument("-f", "--factor", type=int, default=4)
    p.add_argument("-n", "--iters", type=int, default=100, help="timed calls a size, at most")
    p.add_argument("--budget", type=parse_size, default=128 << 20,
                   help="bytes a size, which caps the calls of large sizes (at least 3)")
    p.add_argument("-w", "--warmup", type=int, default=5)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--repeat", type=int, default=1,
                   help="sweeps of each tool, taking turns; each cell is the median")
    p.add_argument("--build", default=os.path.join(REPO, "build/default"),
                   help="build folder with benchmark/perf/allreduce_perf and mimatrix-run")
    a = p.parse_args()
    if a.min_bytes < 4 or a.min_bytes % 4 or a.max_bytes < a.min_bytes or a.factor < 2:
        p.error("-b must be a positive multiple of 4, -e >= -b, -f >= 2")
    if a.max_bytes % 4 or a.ranks < 2 or a.iters < 1 or a.warmup < 0 or a.repeat < 1:
        p.error("-e must be a multiple of 4, --ranks >= 2, -n and --repeat >= 1, -w >= 0")
    return a


def main():
    a = parse_args()
    # Turns, not one tool's repeats in a row: a shared machine's load changes by the minute.
    runs = [(torch_sweep(a, "gloo"), torch_sweep(a, "mimatrix"), perf_sweep(a))
            for _ in range(a.repeat)]
    tools = ([statistics.median(cell) if None not in cell else None for cell in zip(*tool)]
             for tool in zip(*runs))
    report(a, *tools)


if __name__ == "__main__":
    sys.exit(main())
