#!/usr/bin/python3
# ResNet-20 under DistributedDataParallel on one machine, over Gloo or mimatrix (issue 55):
# pytorch_resnet.py's model, data and recipe, N ranks, the gradient allreduce timed.
"""Train ResNet on Fashion-MNIST under DDP with --backend gloo|mimatrix (or --both)."""

import argparse
import os
import sys
import time

import torch
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel

import pytorch_resnet as base
import torch_ranks
from torch_ranks import BACKENDS


class allreduce_timer:
    """Each gradient bucket's allreduce interval, from the hook's call (backward has filled
    the bucket) to its future's completion (the callback runs on the backend's thread).

    Buckets overlap each other and backward, so a step's allreduce time is the union of its
    intervals: the time some gradient allreduce was in flight. Its exposed part runs from
    the last bucket's launch (backward's compute is done) to the last completion: what
    backward waits for the network alone."""

    def __init__(self):
        self.intervals = []

    def take_seconds(self):
        """(in flight, exposed) of the step's intervals, which it then forgets."""
        busy, end = 0.0, float("-inf")
        for s, e in sorted(self.intervals):
            busy += max(0.0, e - max(s, end))
            end = max(end, e)
        exposed = max(0.0, end - max(s for s, _ in self.intervals)) if self.intervals else 0.0
        self.intervals.clear()
        return busy, exposed


def timed_allreduce_hook(timer, bucket):
    """DDP's default allreduce hook (on the default group), timed into `timer`."""
    start = time.perf_counter()

    def stamp(fut):
        timer.intervals.append((start, time.perf_counter()))
        return fut.value()
    return allreduce_hook(None, bucket).then(stamp)


def rank_main(rank, a):
    ranks = a.ranks
    torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // ranks))
    torch.manual_seed(a.seed)  # DDP copies rank 0's weights anyway; the seed makes them a.seed's
    order_gen = torch.Generator().manual_seed(a.seed)  # one epoch order on every rank
    crop_gen = torch.Generator().manual_seed(a.seed + 1 + rank)  # each rank its own crops

    train_x, train_y = base.load_split(a.data, "train")
    steps = base.steps_per_epoch(a, train_x.shape[0], ranks)
    model = DistributedDataParallel(base.ResNet(base.DEPTHS[a.model]))
    timer = allreduce_timer()
    model.register_comm_hook(timer, timed_allreduce_hook)
    opt, sched = base.make_optimizer(model, a, a.epochs * steps)

    images, seconds, in_flight, exposed, timed_steps = 0, 0.0, 0.0, 0.0, 0
    for epoch in range(a.epochs):
        order = torch.randperm(train_x.shape[0], generator=order_gen)
        for step in range(steps):
            first = (step * ranks + rank) * a.batch  # rank r takes the r-th of each N batches
            idx = order[first:first + a.batch]
            x, y = base.augment(train_x[idx], crop_gen), train_y[idx]
            t0 = time.perf_counter()
            base.train_step(model, opt, sched, x, y)  # backward returns once buckets are reduced
            dt = time.perf_counter() - t0
            busy, waited = timer.take_seconds()
            if epoch > 0 or step >= a.warmup:
                images += x.shape[0] * ranks
                seconds += dt
                in_flight += busy
                exposed += waited
                timed_steps += 1
    return {"images/s": images / seconds, "step ms": 1e3 * seconds / timed_steps,
            "allreduce ms/step": 1e3 * in_flight / timed_steps,
            "exposed ms/step": 1e3 * exposed / timed_steps,
            "steps": timed_steps, "weights": model.module.state_dict()}


def test_accuracy(a, weights):
    """Rank 0's model on the test set, here in the parent, where every core is free."""
    model = base.ResNet(base.DEPTHS[a.model])
    model.load_state_dict(weights)
    return base.evaluate(model, *base.load_split(a.data, "t10k"))


def run(a, backend):
    r = torch_ranks.spawn(rank_main, a.ranks, backend, a)
    r["test acc %"] = test_accuracy(a, r.pop("weights"))
    print(f"pytorch_ddp: {backend} {a.model} {a.ranks} ranks, {r['steps']} timed steps: "
          f"{r['images/s']:.1f} images/s, step {r['step ms']:.1f} ms, allreduce "
          f"{r['allreduce ms/step']:.2f} ms/step ({r['exposed ms/step']:.2f} exposed), "
          f"test-acc {r['test acc %']:.2f}%", flush=True)
    return r


def print_table(gloo, mm):
    print("\n| metric | gloo | mimatrix | mimatrix / gloo |\n|---|---|---|---|")
    for key in ("images/s", "step ms", "allreduce ms/step", "exposed ms/step", "test acc %"):
        print(f"| {key} | {gloo[key]:.2f} | {mm[key]:.2f} | {mm[key] / gloo[key]:.2f} |")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__)
    base.add_recipe_args(p)
    p.add_argument("--backend", choices=BACKENDS, default="mimatrix")
    p.add_argument("--both", action="store_true", help="gloo, then mimatrix, and a table")
    p.add_argument("--ranks", type=int, default=2, help="processes; each gets cores/ranks threads")
    a = p.parse_args()
    base.check_recipe_args(p, a)
    if a.ranks < 1:
        p.error("--ranks must be >= 1")
    return a


def main():
    a = parse_args()
    if not a.both:
        run(a, a.backend)
        return
    gloo, mm = (run(a, b) for b in BACKENDS)
    print_table(gloo, mm)


if __name__ == "__main__":
    sys.exit(main())
