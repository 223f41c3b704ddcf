"""Programs that take paths fsdpskip does not list (issue 53): two gloo
ranks on the CPU, each variant run with and without the preload; every rank
writes a digest of what it ends with to OUT/rank<N>.json. Each is seeded
alike on every rank, so without fsdpskip the ranks agree where a sync
makes them, and the run with it must end bitwise the same.

usage: exactness.py --out DIRECTORY VARIANT"""
import argparse
import hashlib
import json
import os

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn


# Every tensor given to a collective, held until the group is destroyed:
# torch 2.6's gloo worker can otherwise drop the last reference to one while
# destroy_process_group holds the GIL and joins it, and hang (docs/limits.md).
HELD = []


def given(tensor):
    HELD.append(tensor)
    return tensor


def digest(tensors):
    hashed = hashlib.sha1()
    for tensor in tensors:
        hashed.update(tensor.detach().contiguous().numpy().tobytes())
    return hashed.hexdigest()


def model():
    return nn.Sequential(nn.Linear(256, 256), nn.Linear(256, 128))


def group_of_one(rank):
    """Tensor parallelism alone (data-parallel degree 1): each rank's
    data-parallel group is itself, and DeepSpeed's _broadcast_model still
    broadcasts over it from the rank itself."""
    m = model()
    groups = [dist.new_group([0]), dist.new_group([1])]
    for p in m.parameters():
        dist.broadcast(given(p.data), src=rank, group=groups[rank])
    return list(m.parameters())


def ddp_of_one(rank):
    m = model()
    groups = [dist.new_group([0]), dist.new_group([1])]
    ddp = given(nn.parallel.DistributedDataParallel(m, process_group=groups[rank]))
    ddp(torch.randn(4, 256)).sum().backward()
    torch.optim.SGD(m.parameters(), lr=0.1).step()
    return list(m.parameters())


def channels_last(rank):
    """timm's --channels-last under DDP: the sync writes strided storages."""
    m = nn.Conv2d(64, 64, 3).to(memory_format=torch.channels_last)
    ddp = given(nn.parallel.DistributedDataParallel(m))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    x = torch.randn(2, 64, 8, 8).to(memory_format=torch.channels_last)
    ddp(x).sum().backward()
    opt.step()
    return list(m.parameters())


def recv_then_steps(rank):
    """Values that arrive by dist.recv, then optimizer steps (add_, mul_)."""
    m = model()
    for p in m.parameters():
        if rank == 0:
            dist.send(given(p.data), 1)
        else:
            dist.recv(given(p.data), 0)
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    for _ in range(2):
        m(torch.randn(4, 256)).sum().backward()
        opt.step()
    return list(m.parameters())


def local_checkpoint_then_double(rank):
    """Each rank loads a checkpoint of its own (load_state_dict), then .double()."""
    m = model()
    source = model()
    m.load_state_dict(source.state_dict())
    m = m.double()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    m(torch.randn(4, 256, dtype=torch.double)).sum().backward()
    opt.step()
    return list(m.parameters())


def ema_before_sync(rank):
    m = model()
    ema = [p.detach() * 1.0 for p in m.parameters()]
    anchor = torch.nn.utils.parameters_to_vector(m.parameters()).detach()
    for p in m.parameters():
        dist.broadcast(given(p.data), src=0)
    return ema + [anchor] + list(m.parameters())


def all_gather_while_loading(rank):
    m = model()
    gathered = [torch.empty_like(m[0].weight) for _ in range(2)]
    dist.all_gather(given(gathered), given(m[0].weight.data))
    return gathered


def gather_while_loading(rank):
    m = model()
    gathered = [torch.empty_like(m[0].weight) for _ in range(2)] if rank == 0 else None
    dist.gather(given(m[0].weight.data), given(gathered), dst=0)
    return gathered or [m[0].weight]


def all_reduce_sync(rank):
    """Parameters synced by all_reduce and a division."""
    m = model()
    for p in m.parameters():
        dist.all_reduce(given(p.data))
        p.data /= 2
    return list(m.parameters())


def source_written_by_others(rank):
    """A source whose skipped storage something else wrote: eye_, sparse_,
    and a normal_ of fewer than 16 values; then broadcast from rank 1."""
    eye, sparse = nn.Parameter(torch.empty(64, 64)), nn.Parameter(torch.empty(64, 64))
    nn.init.normal_(eye)
    nn.init.eye_(eye)
    nn.init.normal_(sparse)
    nn.init.sparse_(sparse, 0.5)
    short = nn.Parameter(torch.empty(2048))
    nn.init.normal_(short)
    with torch.no_grad():
        short[:8].normal_()
    params = [eye, sparse, short]
    for p in params:
        dist.broadcast(given(p.data), src=1)
    return params


def randperm_between(rank):
    """A train/validation split between the build and the sync."""
    p = nn.Parameter(torch.empty(512, 512))
    nn.init.normal_(p)
    perm = torch.randperm(1000)
    draws = torch.randint(0, 100, (16,)).float()
    dist.broadcast(given(p.data), src=0)
    return [p, perm.float(), draws]


def numpy_and_buffers(rank):
    """Reads through numpy, the buffer protocol and a strided view before the sync."""
    m = model()
    seen = [torch.from_numpy(m[0].weight.detach().numpy().copy()),
            torch.frombuffer(bytearray(memoryview(m[1].weight.detach().numpy())), dtype=torch.float32),
            m[0].weight.detach().t()[3].clone()]
    for p in m.parameters():
        dist.broadcast(given(p.data), src=0)
    return seen + list(m.parameters())


def save_before_sync(rank, out):
    m = model()
    path = os.path.join(out, "saved%d.pt" % rank)
    torch.save(m.state_dict(), path)
    with open(path, "rb") as f:  # written by the kernel from the storage's pages
        raw = np.frombuffer(f.read(), dtype=np.uint8)
    for p in m.parameters():
        dist.broadcast(given(p.data), src=0)
    return list(torch.load(path).values()) + [torch.from_numpy(raw.astype(np.float32))]


def share_memory_before_sync(rank):
    m = model()
    m.share_memory()
    for p in m.parameters():
        dist.broadcast(given(p.data), src=0)
    return list(m.parameters())


def trunc_normal_sent_and_read(rank):
    """trunc_normal_ (up to torch 2.11 uniform_ and steps that join its
    recipe; from 2.12 rejection sampling, whose draws run), converted to
    half and read by an EMA before the sync, and sent by rank 1 (a source
    replays the steps); beside it a normal_ parameter, skipped on every torch."""
    a, b = nn.Parameter(torch.empty(256, 256)), nn.Parameter(torch.empty(256, 256))
    c = nn.Parameter(torch.empty(256, 256))
    nn.init.trunc_normal_(a, std=0.02)
    nn.init.trunc_normal_(b, std=0.02, a=-0.03, b=0.05)
    nn.init.normal_(c, std=0.02)
    half = a.detach().half()
    ema = [b.detach() * 1.0]
    dist.broadcast(given(a.data), src=1)
    dist.broadcast(given(b.data), src=0)
    dist.broadcast(given(c.data), src=1)
    return [a, b, c, half] + ema


VARIANTS = {name: fn for name, fn in globals().items() if callable(fn) and name not in
            ("digest", "given", "model", "main", "argparse", "hashlib", "json", "os")}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("variant", choices=sorted(name for name, fn in VARIANTS.items()
                                                  if getattr(fn, "__module__", "") == "__main__"))
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    run = VARIANTS[args.variant]
    ended = run(rank, args.out) if args.variant == "save_before_sync" else run(rank)
    result = {"rank": rank, "digest": digest(ended), "generator": digest([torch.get_rng_state()]),
              "next_draw": digest([torch.rand(8)])}
    dist.barrier()
    with open(os.path.join(args.out, "rank%d.json" % rank), "w") as f:
        json.dump(result, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
