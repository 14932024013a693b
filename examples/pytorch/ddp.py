#!/usr/bin/env python3
"""Deterministic torch.distributed (DDP, NCCL) training for cudaw: one process per GPU.

Without --rank it starts --world ranks of itself (rank r on cuda:r) and waits for them; each rank
prints one line per step, "rank R step N loss <exact hex float>", and with --record PREFIX writes
its losses to PREFIX.rankR, or with --check PREFIX compares them bit for bit ("check: ok").
--pid-dir DIR: each rank writes its pid to DIR/rankR.pid (for cudaw-ctl checkpoint --group).
--step-delay S sleeps S seconds after each step (so that a pause lands mid-training).

Multicast stays off (NVLink SHARP / NVLS and symmetric memory multicast): it is set here before
torch is imported, and the check script sets it too.
"""
import argparse
import os
import subprocess
import sys
import time

for name, value in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
                    ("NVSHMEM_DISABLE_NVLS", "1"), ("CUBLAS_WORKSPACE_CONFIG", ":4096:8")):
    os.environ.setdefault(name, value)


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--rank", type=int)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--port", type=int, default=29531)
    p.add_argument("--record")
    p.add_argument("--check")
    p.add_argument("--pid-dir")
    p.add_argument("--step-delay", type=float, default=0.0)
    return p.parse_args()


def launch(args):
    """Start the ranks (plain processes: each inherits the environment, LD_PRELOAD included)."""
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(args.port),
               WORLD_SIZE=str(args.world))
    ranks = []
    for r in range(args.world):
        cmd = [sys.executable, os.path.abspath(__file__), "--rank", str(r)] + sys.argv[1:]
        ranks.append(subprocess.Popen(cmd, env=dict(env, RANK=str(r), LOCAL_RANK=str(r))))
    codes = [p.wait() for p in ranks]
    print("ranks exited:", codes, flush=True)
    return 0 if all(c == 0 for c in codes) else 1


def train(args):
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank = args.rank
    if args.pid_dir:
        with open(os.path.join(args.pid_dir, "rank%d.pid" % rank), "w") as f:
            f.write("%d\n" % os.getpid())
    torch.cuda.set_device(rank)
    device = torch.device("cuda", rank)
    dist.init_process_group("nccl", rank=rank, world_size=args.world, device_id=device)
    torch.manual_seed(1234)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.use_deterministic_algorithms(True)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
            self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
            self.fc1 = nn.Linear(32 * 8 * 8, 256)
            self.fc2 = nn.Linear(256, 10)

        def forward(self, x):
            x = F.max_pool2d(F.relu(self.conv1(x)), 2)
            x = F.max_pool2d(F.relu(self.conv2(x)), 2)
            return self.fc2(F.relu(self.fc1(x.flatten(1))))

    model = DDP(Net().to(device), device_ids=[rank])
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    gen = torch.Generator(device="cpu").manual_seed(100 + rank)  # each rank its own shard
    xs = torch.randn(args.steps, args.batch, 3, 32, 32, generator=gen).to(device)
    ys = torch.randint(0, 10, (args.steps, args.batch), generator=gen).to(device)
    losses = []
    for step in range(args.steps):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(xs[step]), ys[step])
        loss.backward()  # DDP all-reduces the gradients (NCCL) here
        opt.step()
        # The mean loss over ranks: one more collective, and every rank prints the same number.
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        value = (mean / args.world).item()
        losses.append(value.hex())
        print("rank %d step %d loss %s" % (rank, step, value.hex()), flush=True)
        if args.step_delay:
            time.sleep(args.step_delay)
    dist.barrier()
    dist.destroy_process_group()
    if args.record:
        with open("%s.rank%d" % (args.record, rank), "w") as f:
            f.write("\n".join(losses) + "\n")
    if args.check:
        with open("%s.rank%d" % (args.check, rank)) as f:
            want = f.read().split()
        if want != losses:
            bad = next(i for i, (a, b) in enumerate(zip(want + [""] * len(losses), losses)) if a != b)
            print("rank %d check: FAILED at step %d: %s, expected %s" %
                  (rank, bad, losses[bad], want[bad] if bad < len(want) else "nothing"), flush=True)
            return 1
        print("rank %d check: ok (%d steps identical)" % (rank, len(losses)), flush=True)
    return 0


if __name__ == "__main__":
    a = parse()
    sys.exit(launch(a) if a.rank is None else train(a))
