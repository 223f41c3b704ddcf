"""One rank of a model-loading job, as FSDP's RAM-efficient loading runs it.

Builds a Llama-shaped fp32 model in one of several init styles, measures the
construction's wall time and peak RSS growth, syncs rank 0's values to every
rank, verifies the result across ranks, and writes one JSON file per rank.
Run it under torchrun (gloo, CPU). Used by the demo, the tests and the
benchmarks, so they all measure the same thing.
"""
import argparse
import datetime
import json
import math
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn

import launch
from measure import PeakGrowth, digest, gathered

SIZES = {  # name: (hidden, intermediate, layers, vocab)
    "tiny": (64, 172, 2, 512),
    "0.1b": (768, 2048, 8, 32000),
    "0.5b": (1536, 4096, 14, 32000),
    "1b": (2048, 5504, 16, 32000),
}
STYLES = ("hf4", "torch", "trunc", "hf5", "meta", "megatron", "to_empty")
HELD = []  # --hold: models that live until interpreter shutdown
TENSOR_PARALLEL = {"size": 1, "rank": 0}  # --groups: this rank's place in its tensor-parallel group


def placeholder(*shape, style):
    """A parameter as each framework generation creates it before loading."""
    if style == "hf5":  # transformers 5: zeros placeholders, no init
        return nn.Parameter(torch.zeros(*shape))
    return nn.Parameter(torch.empty(*shape))


class Linear(nn.Module):
    def __init__(self, fan_in, fan_out, style, bias=False):
        super().__init__()
        if style == "torch":
            self.inner = nn.Linear(fan_in, fan_out, bias=bias)  # kaiming_uniform_ + uniform_
        else:
            self.weight = placeholder(fan_out, fan_in, style=style)
            self.bias = placeholder(fan_out, style=style) if bias else None


class Block(nn.Module):
    def __init__(self, hidden, intermediate, style):
        super().__init__()
        self.attn_norm = placeholder(hidden, style=style if style != "torch" else "hf4")
        self.q, self.k, self.v, self.o = (Linear(hidden, hidden, style, bias=(i < 3)) for i in range(4))
        self.mlp_norm = placeholder(hidden, style=style if style != "torch" else "hf4")
        self.gate = Linear(hidden, intermediate, style)
        self.up = Linear(hidden, intermediate, style)
        self.down = Linear(intermediate, hidden, style)
        if style == "torch":
            nn.init.ones_(self.attn_norm)
            nn.init.ones_(self.mlp_norm)


class Model(nn.Module):
    dropout = 0.0  # --dropout: the loss draws masks from the global generator

    def __init__(self, size, style):
        super().__init__()
        hidden, intermediate, layers, vocab = SIZES[size]
        if style == "torch":
            self.embed = nn.Embedding(vocab, hidden)  # normal_
        else:
            self.embed = placeholder(vocab, hidden, style=style)
        self.blocks = nn.ModuleList(Block(hidden, intermediate, style) for _ in range(layers))
        self.norm = placeholder(hidden, style=style if style != "torch" else "hf4")
        self.head = Linear(hidden, vocab, style)
        if style == "torch":
            nn.init.ones_(self.norm)

    def forward(self):
        """A loss over every parameter (--train): what matters is that each
        one gets a gradient, which DDP all-reduces."""
        return sum((nn.functional.dropout(p.float(), self.dropout) * p.float()).sum() for p in self.parameters())


def init_weights(model, style, std=0.02):
    """transformers-4 `_init_weights` on `.data`, ViT-style trunc_normal_, or
    Megatron's CPU init: a full master weight of every tensor-parallel rank's
    slices initialised on each rank, then this rank's slice copied in."""
    for name, param in model.named_parameters():
        if style == "megatron" and param.dim() > 1:
            master = torch.empty(param.shape[0] * TENSOR_PARALLEL["size"], param.shape[1])
            nn.init.normal_(master, std=std)
            slices = torch.split(master, param.shape[0], dim=0)
            with torch.no_grad():
                torch.cat(slices[TENSOR_PARALLEL["rank"]:TENSOR_PARALLEL["rank"] + 1], dim=0, out=param)
        elif style == "megatron":
            with torch.no_grad():
                param.fill_(1.0) if name.endswith("norm") else param.zero_()
        elif style == "hf4":
            if name.endswith("norm"):
                param.data.fill_(1.0)
            elif name.endswith("bias"):
                param.data.zero_()
            else:
                param.data.normal_(mean=0.0, std=std)
        elif style == "trunc":
            if param.dim() > 1:
                nn.init.trunc_normal_(param, std=std)
            else:
                nn.init.ones_(param) if name.endswith("norm") else nn.init.zeros_(param)


def build(size, style, skeleton=None):
    if style == "meta":  # the ideal: built on meta, materialised, no init at all
        return build_on_meta(size).to_empty(device="cpu")
    if style == "to_empty":  # FSDP2's and torchtitan's: built on meta, materialised, then each module's own init
        model = (skeleton or build_on_meta(size, "torch")).to_empty(device="cpu")
        for module in model.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                module.reset_parameters()  # kaiming_uniform_ and uniform_; normal_
        for name, param in model.named_parameters():
            if name.endswith("norm"):
                nn.init.ones_(param)
        return model
    model = Model(size, style)
    init_weights(model, style)
    return model


def build_on_meta(size, style="hf4"):
    # torch 1.13 has no `with torch.device("meta")`: route torch.empty there.
    cpu_empty = torch.empty

    def meta_empty(*shape, **kwargs):
        kwargs["device"] = "meta"
        return cpu_empty(*shape, **kwargs)

    torch.empty = meta_empty
    try:
        return Model(size, style)
    finally:
        torch.empty = cpu_empty


def model_bytes(model):
    return sum(p.numel() * p.element_size() for p in model.parameters())


def data_parallel_group(tensor_parallel):
    """This rank's data-parallel group when `tensor_parallel`-way tensor
    parallelism runs inside each group of consecutive ranks, as Megatron and
    DeepSpeed make them: {k, k+T, k+2T, ...}, whose source is its first rank
    (global rank k: any local rank). Every rank makes every group, in the
    same order. None and 0 for one group of every rank."""
    if tensor_parallel <= 1:
        return None, 0
    world = dist.get_world_size()
    mine = None
    for first in range(tensor_parallel):
        ranks = list(range(first, world, tensor_parallel))
        group = dist.new_group(ranks)
        if dist.get_rank() in ranks:
            mine = group, first
    return mine


def sync(model, how, mesh=None, group=None, source=0):
    if how == "ddp":  # the _broadcast_coalesced path FSDP1's sync_module_states takes, from the group's first rank
        nn.parallel.DistributedDataParallel(model, process_group=group)
    elif how == "broadcast":  # DeepSpeed's _broadcast_model: one broadcast per parameter
        for param in model.parameters():
            dist.broadcast(param.data, src=source, group=group)
    elif how in ("fsdp2", "hsdp"):
        fsdp2_sync(model, mesh)
    return model


def fsdp2_mesh(hybrid=False):
    """FSDP2's device mesh, and its one-time costs (lazy imports, first use)
    paid on a small frozen module before anything is measured: frozen, so
    fsdpskip tags nothing here. `hybrid`: hybrid sharding's 2-D mesh
    (replicate across pairs of ranks x shard within them), where
    distribute_tensor broadcasts over each replicate group from its first
    rank (global rank 1 for {1, 3}) and scatters over each shard group."""
    from torch.distributed.device_mesh import init_device_mesh
    world = dist.get_world_size()
    shape = (world // 2, 2) if hybrid else (world,)
    mesh = init_device_mesh("cpu", shape, mesh_dim_names=("replicate", "shard")[-len(shape):])
    block = nn.Module()
    block.weight = nn.Parameter(torch.zeros(64, 64), requires_grad=False)
    warm_up = nn.Module()
    warm_up.blocks = nn.ModuleList([block])
    fsdp2_sync(warm_up, mesh)
    return mesh


def fsdp2_sync(model, mesh):
    """FSDP2 as accelerate's RAM-efficient loading runs it: fully_shard every
    block and the model, then rank 0's values streamed into the shards one
    parameter at a time (broadcast of the full tensor, distribute_tensor,
    load_state_dict(assign=True): accelerate's fsdp2_load_full_state_dict).
    Afterwards each rank holds 1/world of the model."""
    from torch.distributed.tensor import distribute_tensor
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:  # torch < 2.6
        from torch.distributed._composable.fsdp import fully_shard
    # Rank 0's values: its own parameters, kept (as a loaded checkpoint would be).
    full = {name: p.detach() for name, p in model.named_parameters()} if dist.get_rank() == 0 else None
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    sharded = {}
    for name, param in model.named_parameters():
        value = full.pop(name) if full is not None else torch.empty(param.size(), dtype=param.dtype)
        dist.broadcast(value, src=0)
        sharded[name] = nn.Parameter(distribute_tensor(value, mesh, param.placements),
                                     requires_grad=param.requires_grad)
        del value
    model.load_state_dict(sharded, assign=True)


def train(model, steps, wrapped):
    """`steps` SGD steps with zero_grad(set_to_none=False), as a training
    loop runs them: DDP all-reduces the gradients (`wrapped`), or they are
    all-reduced by hand. Returns the losses."""
    net = nn.parallel.DistributedDataParallel(model) if wrapped else model
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=False)
        loss = net()
        loss.backward()
        if not wrapped:
            for param in model.parameters():
                dist.all_reduce(param.grad)
        optimizer.step()
        losses.append(float(loss))
    return losses


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", choices=SIZES, default="tiny")
    parser.add_argument("--style", choices=STYLES, default="hf4")
    parser.add_argument("--sync", choices=("ddp", "broadcast", "fsdp2", "hsdp", "none"), default="ddp",
                        help="hsdp: FSDP2 on a 2-D mesh (replicate x shard), rank 0's values broadcast, then "
                             "distributed")
    parser.add_argument("--convert", choices=("none", "half", "double"), default="none",
                        help="dtype conversion before the sync (gloo in Debian's torch 2.x broadcasts no half)")
    parser.add_argument("--out", required=True, help="directory for rank<N>.json")
    parser.add_argument("--verify", action="store_true", help="hash every parameter and compare across ranks")
    parser.add_argument("--hold", action="store_true", help="keep the model alive until the process exits")
    parser.add_argument("--barrier-before-sync", action="store_true",
                        help="a one-element all-reduce before the sync, as NCCL's barrier and accelerate's "
                             "wait_for_everyone are")
    parser.add_argument("--unsynced-model", action="store_true",
                        help="a second, evaluation-only tiny model built after the first and left out of the sync, "
                             "as a reference or reward model that no sync covers; its digests are compared across "
                             "ranks after --train")
    parser.add_argument("--dropout", type=float, default=0.0, help="--train's loss applies dropout with this p")
    parser.add_argument("--groups", type=int, default=0, metavar="T",
                        help="sync within the data-parallel groups of T-way tensor parallelism ({k, k+T, ...}, each "
                             "from its first rank, as Megatron's and DeepSpeed's are)")
    parser.add_argument("--source", type=int, default=0,
                        help="the rank --sync broadcast sends from (without --groups)")
    parser.add_argument("--seed-per-rank", action="store_true",
                        help="each rank seeds with its own rank, so that each source's values are its own")
    parser.add_argument("--timeout", type=float, default=1800, help="the process group's timeout, in seconds")
    parser.add_argument("--train", type=int, default=0, metavar="STEPS",
                        help="SGD steps after the sync: DDP's gradient all-reduce (with --sync none, all-reduces "
                             "of the gradients by hand)")
    args = parser.parse_args()

    torch.set_num_threads(1)
    # srun starts each task with SLURM_PROCID and SLURM_NTASKS, not
    # torchrun's RANK and WORLD_SIZE (as training scripts do, take those).
    if "RANK" not in os.environ and "SLURM_PROCID" in os.environ:
        os.environ.update(RANK=os.environ["SLURM_PROCID"], WORLD_SIZE=os.environ["SLURM_NTASKS"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
    rank = dist.get_rank()
    torch.manual_seed(1234 + (rank if args.seed_per_rank else 0))
    mesh = fsdp2_mesh(hybrid=args.sync == "hsdp") if args.sync in ("fsdp2", "hsdp") else None
    group, source = data_parallel_group(args.groups)
    if args.groups > 1:
        TENSOR_PARALLEL.update(size=args.groups, rank=rank % args.groups)
    else:
        source = args.source

    # to_empty's meta skeleton is built before the clock: every rank pays it
    # alike, and on torch 2 its first meta normal_ imports torch._refs (about 1 s).
    skeleton = build_on_meta(args.size, "torch") if args.style == "to_empty" else None
    dist.barrier()
    growth = PeakGrowth()
    start = time.perf_counter()
    model = build(args.size, args.style, skeleton)
    build_seconds = time.perf_counter() - start
    build_growth = growth.bytes()
    unsynced = build("tiny", args.style) if args.unsynced_model else None
    if args.convert != "none":
        model = getattr(model, args.convert)()
    # --verify: rank 0's values before the sync are what every rank must hold
    # after it (told after the sync: a broadcast before it would be taken for
    # rank 0's data arriving).
    truth = [{name: digest(p) for name, p in model.named_parameters()} if rank == 0 and args.verify else None]

    if args.barrier_before_sync:
        dist.all_reduce(torch.zeros(1))
    start = time.perf_counter()
    model = sync(model, args.sync, mesh, group, source)
    sync_seconds = time.perf_counter() - start
    result = {
        "rank": rank,
        "local_rank": int(os.environ.get("LOCAL_RANK", os.environ.get("SLURM_LOCALID", rank))),
        "size": args.size,
        "style": args.style,
        "model_bytes": model_bytes(model),
        "parameters": sum(p.numel() for p in model.parameters()),
        "build_seconds": build_seconds,
        "sync_seconds": sync_seconds,  # a source's replay happens here
        "rss_growth_bytes": build_growth,
        # The whole job's peak so far: build and sync.
        "job_rss_growth_bytes": growth.bytes(),
    }
    if args.verify:
        # Where the global generator stands after the sync, and a layer made
        # then without reseeding (a head, an adapter): as without fsdpskip,
        # the same on every rank. (After a broadcast: with --sync none it ends
        # the loading, so the layer is not a placeholder.)
        result["rng_after_sync"] = digest(torch.get_rng_state())
        dist.broadcast_object_list(truth, src=0)
        unseeded = nn.Linear(64, 64)
        digests = {name: digest(p) for name, p in model.named_parameters()}
        everyone = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, digests)
        result["equal_to_rank0"] = all(d == truth[0] for d in everyone)
        local = lambda p: p.to_local() if hasattr(p, "to_local") else p  # a shard: this rank's part
        result["all_finite"] = all(bool(torch.isfinite(local(p).float()).all()) for p in model.parameters())
        result["digests"] = digests
        unseeded_digests = [None] * dist.get_world_size()
        dist.all_gather_object(unseeded_digests, digest(unseeded.weight))
        result["unseeded_layer_equal"] = all(d == unseeded_digests[0] for d in unseeded_digests)
        # A layer created after the sync gets its real, seeded initialisation.
        torch.manual_seed(4321)
        late = nn.Linear(64, 64)
        late_digests = [None] * dist.get_world_size()
        dist.all_gather_object(late_digests, digest(late.weight))
        result["late_layer_equal"] = all(d == late_digests[0] for d in late_digests)
        result["late_layer_nonzero"] = bool(late.weight.abs().sum() > 0)
    if args.train:
        Model.dropout = args.dropout
        result["losses"] = train(model, args.train, wrapped=args.sync == "ddp")
    if unsynced is not None:
        # Seeded alike and built alike, it is the same on every rank without
        # fsdpskip: a correct program, although no sync covers it.
        digests = gathered({name: digest(p) for name, p in unsynced.named_parameters()})
        result["unsynced_equal_to_rank0"] = all(d == digests[0] for d in digests)
    if args.hold:
        HELD.append(model)
    with open(os.path.join(args.out, "rank%d.json" % rank), "w") as out:
        json.dump(result, out)
    launch.end_rank()


if __name__ == "__main__":
    main()
