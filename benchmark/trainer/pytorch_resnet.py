#!/usr/bin/python3
# The PyTorch anchor of the ResNet trainer (issue 15): the model, recipe, data and output
# format of examples/02_resnet/resnet_train, in plain PyTorch on the CPU, for comparison.
"""Train a CIFAR-style ResNet-20/32/56 on Fashion-MNIST with PyTorch (no torchvision)."""

import argparse
import gzip
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

MEAN = 0.28604060  # over all train pixels on the [0, 1] scale (docs/trainer.md)
STD = 0.35302424
BLACK = (0.0 - MEAN) / STD  # padding value: a black pixel, normalized
PAD = 4
SIDE = 28
DEPTHS = {"resnet20": 3, "resnet32": 5, "resnet56": 9}


def read_idx(path):
    """An IDX file of unsigned bytes (gzip or plain) as a numpy array of its shape."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise ValueError(f"{path}: not an IDX file of unsigned bytes")
    rank = raw[3]
    dims = struct.unpack(f">{rank}I", raw[4:4 + 4 * rank])
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * rank)
    if data.size != int(np.prod(dims)):
        raise ValueError(f"{path}: {data.size} bytes of data, header says {dims}")
    return data.reshape(dims)


def find_file(directory, stem):
    for name in (stem + ".gz", stem):
        path = os.path.join(directory, name)
        if os.path.exists(path):
            return path
    sys.exit(f"pytorch_resnet: no {stem}[.gz] in {directory} "
             "(apt-get install dataset-fashion-mnist, or --data DIR)")


def load_split(directory, split):
    images = read_idx(find_file(directory, f"{split}-images-idx3-ubyte"))
    labels = read_idx(find_file(directory, f"{split}-labels-idx1-ubyte"))
    x = torch.from_numpy(images.astype(np.float32) / 255.0)
    x = ((x - MEAN) / STD).unsqueeze(1).contiguous()  # N x 1 x 28 x 28
    return x, torch.from_numpy(labels.astype(np.int64))


def augment(batch, generator):
    """Pad 4 with black, random 28x28 crop, horizontal flip with probability 1/2.

    One gather over the whole batch: each sample's rows and columns are its crop offset
    plus 0..27, and a flipped sample's columns run backwards."""
    b = batch.shape[0]
    padded = F.pad(batch[:, 0], (PAD, PAD, PAD, PAD), value=BLACK)  # B x 36 x 36
    oy = torch.randint(0, 2 * PAD + 1, (b, 1), generator=generator)
    ox = torch.randint(0, 2 * PAD + 1, (b, 1), generator=generator)
    flip = torch.rand(b, 1, generator=generator) < 0.5
    ramp = torch.arange(SIDE).unsqueeze(0)
    rows = oy + ramp
    cols = torch.where(flip, ox + (SIDE - 1) - ramp, ox + ramp)
    out = padded[torch.arange(b)[:, None, None], rows[:, :, None], cols[:, None, :]]
    return out.unsqueeze(1).contiguous()


def conv3x3(cin, cout, stride):
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = conv3x3(cin, cout, stride)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = conv3x3(cout, cout, 1)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = None
        if stride != 1 or cin != cout:  # option B: a projection only where the shape changes
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.shortcut is None else self.shortcut(x)))


class ResNet(nn.Module):
    """ResNet-6n+2 for 1x28x28: stem, stages of 16, 32, 64 channels, pool, linear."""

    def __init__(self, n, classes=10):
        super().__init__()
        self.stem = nn.Sequential(conv3x3(1, 16, 1), nn.BatchNorm2d(16), nn.ReLU())
        blocks, cin = [], 16
        for cout, stride in ((16, 1), (32, 2), (64, 2)):
            for i in range(n):
                blocks.append(BasicBlock(cin, cout, stride if i == 0 else 1))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(64, classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_in", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def evaluate(model, x, y):
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, x.shape[0], 1000):
            correct += (model(x[i:i + 1000]).argmax(1) == y[i:i + 1000]).sum().item()
    model.train()
    return 100.0 * correct / x.shape[0]


def add_recipe_args(p):
    """The model, data and recipe flags, shared with pytorch_ddp.py so both train alike."""
    p.add_argument("--model", choices=sorted(DEPTHS), default="resnet20")
    p.add_argument("--data", default=os.environ.get("MIMATRIX_FASHION_MNIST_DIR",
                                                    "/usr/share/datasets/fashion-mnist"))
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.1, help="peak learning rate of the one cycle")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--no-nesterov", dest="nesterov", action="store_false")
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--steps", type=int, default=0, help="cap on steps per epoch (0: a full epoch)")
    p.add_argument("--warmup", type=int, default=0,
                   help="first steps of epoch 1 left out of images/s (still trained)")
    p.add_argument("--seed", type=int, default=1)


def check_recipe_args(p, a):
    if a.batch < 1 or a.epochs < 1 or a.steps < 0 or a.warmup < 0:
        p.error("--batch and --epochs must be >= 1; --steps and --warmup >= 0")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__)
    add_recipe_args(p)
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("--eval", action=argparse.BooleanOptionalAction, default=True,
                   help="test accuracy at the end of each epoch")
    a = p.parse_args()
    check_recipe_args(p, a)
    if a.threads < 1:
        p.error("--threads must be >= 1")
    return a


def steps_per_epoch(a, images, ranks=1):
    """Full batches of `ranks` x --batch in an epoch (the last partial one is dropped), capped by --steps."""
    steps = images // (a.batch * ranks)
    if a.steps:
        steps = min(steps, a.steps)
    if steps < 1:
        sys.exit(f"{os.path.basename(sys.argv[0])}: {ranks} x --batch {a.batch} exceeds the {images} images")
    return steps


def make_optimizer(model, a, total_steps):
    """SGD with Nesterov momentum and a one-cycle learning rate stepped every step."""
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum,
                          nesterov=a.nesterov, weight_decay=a.weight_decay)
    sched = torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=a.lr, total_steps=total_steps, pct_start=0.3, anneal_strategy="cos",
        div_factor=25, final_div_factor=1e4, cycle_momentum=False)
    return opt, sched


def train_step(model, opt, sched, x, y):
    """Forward, loss, backward, update; returns the output and the loss."""
    out = model(x)
    loss = F.cross_entropy(out, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    sched.step()
    return out, loss


def main():
    a = parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    generator = torch.Generator().manual_seed(a.seed)

    train_x, train_y = load_split(a.data, "train")
    test_x, test_y = load_split(a.data, "t10k") if a.eval else (None, None)
    steps = steps_per_epoch(a, train_x.shape[0])

    model = ResNet(DEPTHS[a.model])
    model.train()
    opt, sched = make_optimizer(model, a, a.epochs * steps)

    total_images, total_seconds, test_acc = 0, 0.0, None
    for epoch in range(1, a.epochs + 1):
        epoch_start = time.perf_counter()
        order = torch.randperm(train_x.shape[0], generator=generator)
        loss_sum, correct, seen = 0.0, 0, 0
        timed_images, timed_seconds = 0, 0.0
        for step in range(steps):
            idx = order[step * a.batch:(step + 1) * a.batch]
            x, y = augment(train_x[idx], generator), train_y[idx]
            # images/s times the training step only (forward, backward, update): batch
            # assembly and augmentation above are outside it, as is evaluation.
            t0 = time.perf_counter()
            out, loss = train_step(model, opt, sched, x, y)
            dt = time.perf_counter() - t0
            if epoch > 1 or step >= a.warmup:
                timed_images += x.shape[0]
                timed_seconds += dt
            loss_sum += loss.item() * x.shape[0]
            correct += (out.argmax(1) == y).sum().item()
            seen += x.shape[0]
        total_images += timed_images
        total_seconds += timed_seconds
        test_text = "n/a"
        if a.eval:
            test_acc = evaluate(model, test_x, test_y)
            test_text = f"{test_acc:.2f}%"
        rate = timed_images / timed_seconds if timed_seconds > 0 else 0.0
        print(f"epoch {epoch}/{a.epochs}: loss {loss_sum / seen:.4f} "
              f"train-acc {100.0 * correct / seen:.2f}% test-acc {test_text} "
              f"images/s {rate:.1f} time {time.perf_counter() - epoch_start:.1f}s", flush=True)

    rate = total_images / total_seconds if total_seconds > 0 else 0.0
    final = f"{test_acc:.2f}%" if test_acc is not None else "n/a"
    print(f"pytorch_resnet: {a.model} {rate:.1f} images/s, test-acc {final}", flush=True)


if __name__ == "__main__":
    main()
