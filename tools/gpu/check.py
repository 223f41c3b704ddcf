"""The GPU check (tools/gpu-check builds the preload and plugin, then runs
this): fsdpskip with CUDA parameters and NCCL, on PyPI's CUDA torch.

Each step runs in fresh processes under the preload (FSDPSKIP=on, local rank
1, a JSON report per process) and, where a comparison proves the check can
fail, without it:
  a. init_on_cuda       a model built on cuda: nothing in device memory is
                        skipped (page protection cannot see a CUDA kernel
                        read), so the CUDA generator, its random inits and its
                        zero_/fill_ inits are bitwise as without fsdpskip
  b. nccl_broadcast     a world-size-1 NCCL broadcast (through the interposed
                        ncclBcast) into a CUDA parameter: nothing skipped, its
                        init's values kept, nothing pending
  c. two_ranks_gloo     two ranks sharing the GPU over gloo: rank 1's CUDA
                        parameters equal rank 0's after the sync, nothing
                        skipped, nothing pending
  d. from_pretrained    transformers' from_pretrained with device_map cuda:0
                        under accelerate's FSDP variables at local rank 1,
                        synced: fsdpskip acted, finite, nothing pending
  e. record_stream      the caching allocator still honours record_stream on a
                        tagged storage (its block is not handed out again while
                        a side stream uses it)
  f. fsdp1_sync_module_states
                        FSDP1 with device_id and sync_module_states over NCCL
                        (world size 1) on a model built on the CPU, then a
                        training step: skipped, resolved, nothing pending
  g. lightning_fsdp     Lightning Fabric's FSDP strategy (sync_module_states,
                        world size 1 over NCCL) on a model built on the CPU
                        without empty_init, then a training step: skipped,
                        resolved, nothing pending
  h. accelerate_fsdp2_bf16
                        accelerate's FSDP2 path with cpu_ram_efficient_loading
                        and mixed_precision="bf16" on a bf16 checkpoint (world
                        size 1 over NCCL): rank 1's peak CPU RSS through
                        prepare() with and without fsdpskip, reported whatever
                        fsdpskip changes (accelerate upcasts trainable
                        parameters to fp32 on every rank before the move to
                        meta); training step finite, nothing pending
  i. two_gpus_nccl      two processes, one GPU each, a model built on the CPU,
                        DDP over NCCL with device_ids, a training step: rank 1
                        equals rank 0, nothing pending ("one GPU: skipped" on a
                        machine with one)
  j. fsdp1_hybrid_shard four processes, one GPU each, as two nodes of two:
                        FSDP1 HYBRID_SHARD with sync_module_states, whose
                        inter-node broadcast has local rank 1 as a source:
                        every rank equals rank 0, rank 1 replayed what it
                        skipped where it sent before receiving, nothing
                        pending ("fewer than 4 GPUs: skipped" on a smaller
                        machine)
A step whose framework is not importable says "skipped: not installed" and
makes the verdict "incomplete" (exit status 1); one the machine cannot run
(a second or a fourth GPU) says "n/a" and leaves it a pass
(what the GPU machine lacks can travel with the checkout: put a
`pip install --target` directory on PYTHONPATH). Prints a table and writes
gpu-check.json. Without a GPU it says "no GPU" and exits 1."""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.abspath(__file__)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "..", "workloads"))
from launch import free_port  # noqa: E402
from measure import digest  # noqa: E402
from policy_variables import without_policy  # noqa: E402


# ---- the steps, each run in a child process ------------------------------

def build_model(seed=0):
    import torch
    import torch.nn as nn
    torch.manual_seed(seed)
    model = nn.Sequential(*[nn.Linear(1024, 1024, device="cuda") for _ in range(4)],
                          nn.LayerNorm(1024, device="cuda"), nn.Embedding(8000, 1024, device="cuda"))
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.Linear):
                module.weight.normal_(0.0, 0.02)
                module.bias.zero_()
        nn.init.trunc_normal_(model[-1].weight, std=0.02)
    torch.cuda.synchronize()
    return model


def init_on_cuda(args):
    import torch
    import torch.nn as nn
    model = build_model()
    drawn = [m.weight for m in model if isinstance(m, (nn.Linear, nn.Embedding))]
    filled = [p for p in model.parameters() if all(p is not weight for weight in drawn)]
    return {"cuda_rng": digest(torch.cuda.get_rng_state()), "drawn": [digest(p) for p in drawn],
            "filled": len(filled), "filled_zero": all(bool((p == 0).all()) for p in filled),
            "all_finite": all(bool(torch.isfinite(p).all()) for p in model.parameters())}


def init_group(backend, rank, world):
    import torch.distributed as dist
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    dist.init_process_group(backend, rank=rank, world_size=world)
    return dist


def nccl_broadcast(args):
    import torch
    import torch.nn as nn
    dist = init_group("nccl", 0, 1)
    param = nn.Parameter(torch.empty(1 << 20, device="cuda"))
    nn.init.ones_(param)  # runs under the preload too: device memory is never skipped
    dist.broadcast(param.data, src=0)
    torch.cuda.synchronize()
    dist.destroy_process_group()  # a live group can abort the exit (pytorch #190489)
    return {"all_zero": bool((param == 0).all())}


def two_ranks_gloo(args):
    import torch
    rank = int(os.environ["RANK"])
    dist = init_group("gloo", rank, 2)
    model = build_model(seed=rank)  # without fsdpskip the ranks differ until the sync
    for param in model.parameters():
        dist.broadcast(param.data, src=0)
    torch.cuda.synchronize()
    digests = [digest(p) for p in model.parameters()]
    everyone = [None, None]
    dist.all_gather_object(everyone, digests)
    dist.barrier()
    dist.destroy_process_group()
    return {"equal_to_rank0": everyone[0] == everyone[1],
            "all_finite": all(bool(torch.isfinite(p).all()) for p in model.parameters())}


def cpu_model(seed=0):
    """A model as a training script builds it on the CPU before a framework
    moves it to the GPU: its inits are skipped at local rank 1."""
    import torch
    import torch.nn as nn
    torch.manual_seed(seed)
    model = nn.Sequential(*[nn.Linear(1024, 1024) for _ in range(4)])
    with torch.no_grad():
        for module in model:
            module.weight.normal_(0.0, 0.02)
            module.bias.zero_()
    return model


def fsdp1_sync_module_states(args):
    """FSDP1 as RAM-efficient loading runs it on a GPU: the model built on the
    CPU (its inits skipped at local rank 1), then FullyShardedDataParallel
    with device_id and sync_module_states, which moves it to the GPU and
    broadcasts rank 0's values (world size 1: this process's own), then a
    training step (its reduce-scatter is training's first collective)."""
    import torch
    from torch.distributed.fsdp import FullyShardedDataParallel
    dist = init_group("nccl", 0, 1)
    wrapped = FullyShardedDataParallel(cpu_model(), device_id=torch.cuda.current_device(), sync_module_states=True)
    wrapped(torch.ones(8, 1024, device="cuda")).sum().backward()
    torch.cuda.synchronize()
    finite = all(bool(torch.isfinite(p).all()) for p in wrapped.parameters())
    dist.destroy_process_group()
    return {"all_finite": finite}


def lightning_fsdp(args):
    """Lightning Fabric's FSDP strategy (FSDP1 underneath) with
    sync_module_states, one device, on a model built on the CPU without
    empty_init: setup_module moves it to the GPU and broadcasts rank 0's
    values; then a training step."""
    import torch
    from lightning.fabric import Fabric
    from lightning.fabric.strategies import FSDPStrategy
    fabric = Fabric(accelerator="cuda", devices=1, strategy=FSDPStrategy(sync_module_states=True))
    fabric.launch()
    model = fabric.setup_module(cpu_model())
    optimizer = fabric.setup_optimizers(torch.optim.AdamW(model.parameters(), lr=1e-3))
    fabric.backward(model(torch.ones(8, 1024, device=fabric.device)).sum())
    optimizer.step()
    torch.cuda.synchronize()
    return {"all_finite": all(bool(torch.isfinite(p).all()) for p in model.parameters())}


def bf16_checkpoint(args):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                                 num_attention_heads=16, num_key_value_heads=16, vocab_size=32000)
                     ).to(torch.bfloat16).save_pretrained(os.path.join(args.work, "bf16"))
    return {}


def accelerate_fsdp2_bf16(args):
    """accelerate's FSDP2 path as a user starts it: the plugin (version 2,
    cpu_ram_efficient_loading) and mixed_precision="bf16" given to the
    Accelerator before from_pretrained reads the bf16 checkpoint; prepare()
    (the upcast to fp32, the move to meta, fully_shard, rank 0's state dict
    broadcast) measured; then one training step, its loss exactly."""
    import torch
    from accelerate import Accelerator
    from accelerate.utils import FullyShardedDataParallelPlugin
    from transformers import AutoModelForCausalLM
    from measure import measured
    plugin = FullyShardedDataParallelPlugin(fsdp_version=2, cpu_ram_efficient_loading=True)
    accelerator = Accelerator(fsdp_plugin=plugin, mixed_precision="bf16")
    model = AutoModelForCausalLM.from_pretrained(os.path.join(args.work, "bf16"), dtype=torch.bfloat16)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    (model, optimizer), seconds, growth = measured(lambda: accelerator.prepare(model, optimizer))
    torch.manual_seed(1)
    tokens = torch.randint(0, 32000, (2, 64), device=accelerator.device)
    loss = model(input_ids=tokens, labels=tokens).loss
    accelerator.backward(loss)
    optimizer.step()
    torch.cuda.synchronize()
    accelerator.end_training()
    return {"prepare_seconds": seconds, "prepare_rss_growth_bytes": growth, "loss": float(loss.detach()).hex(),
            "distributed_type": str(accelerator.distributed_type)}


def two_gpus_nccl(args):
    """One rank of a two-process job, a GPU each: the model built on the CPU
    (a different seed per rank, so the check can fail), DDP with device_ids
    broadcasts rank 0's values over NCCL, then a training step."""
    import torch
    import torch.nn as nn
    rank = int(os.environ["RANK"])
    torch.cuda.set_device(rank)
    dist = init_group("nccl", rank, 2)
    model = cpu_model(seed=rank).cuda()
    synced = nn.parallel.DistributedDataParallel(model, device_ids=[rank])
    digests = [digest(p) for p in model.parameters()]
    synced(torch.ones(8, 1024, device="cuda")).sum().backward()
    torch.cuda.synchronize()
    everyone = [None, None]
    dist.all_gather_object(everyone, digests)
    dist.destroy_process_group()
    return {"equal_to_rank0": everyone[0] == everyone[1],
            "all_finite": all(bool(torch.isfinite(p).all()) for p in model.parameters())}


def fsdp1_hybrid_shard(args):
    """One rank of a four-process job, a GPU each, laid out as two nodes of
    two: the model built on the CPU (a different seed per rank), then FSDP1
    HYBRID_SHARD with sync_module_states on a (2 replicate x 2 shard) mesh.
    Its inter-node broadcast sends from each local index's rank on node 0,
    so global rank 1, local rank 1, sends to rank 3. Which broadcast comes
    first changed between torch releases (pytorch #178569 put the
    inter-node one first), so each rank records the groups FSDP syncs over,
    in order: rank 1 sends before anything reached it where its first sync
    is over {1, 3}. Then a training step, and every rank's full
    parameters."""
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy, _init_utils
    rank = int(os.environ["RANK"])
    torch.cuda.set_device(rank)
    dist = init_group("nccl", rank, 4)
    mesh = init_device_mesh("cuda", (2, 2), mesh_dim_names=("replicate", "shard"))
    synced_over, sync = [], _init_utils._sync_module_params_and_buffers

    def recorded_sync(module, params, process_group):
        synced_over.append(dist.get_process_group_ranks(process_group))
        return sync(module, params, process_group)
    _init_utils._sync_module_params_and_buffers = recorded_sync
    wrapped = FullyShardedDataParallel(cpu_model(seed=rank), device_id=rank, sync_module_states=True,
                                       sharding_strategy=ShardingStrategy.HYBRID_SHARD, device_mesh=mesh)
    wrapped(torch.ones(8, 1024, device="cuda")).sum().backward()
    torch.cuda.synchronize()
    with FullyShardedDataParallel.summon_full_params(wrapped):
        digests = [digest(p) for p in wrapped.parameters()]
        finite = all(bool(torch.isfinite(p).all()) for p in wrapped.parameters())
    everyone = [None] * 4
    dist.all_gather_object(everyone, digests)
    dist.destroy_process_group()
    return {"equal_to_rank0": all(d == everyone[0] for d in everyone), "all_finite": finite,
            "synced_over": synced_over}


def save_checkpoint(args):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(hidden_size=512, intermediate_size=1376, num_hidden_layers=4,
                                 num_attention_heads=8, num_key_value_heads=8, vocab_size=16000)
                     ).save_pretrained(args.work)
    return {}


def from_pretrained(args):
    import torch
    from transformers import AutoModelForCausalLM
    dist = init_group("gloo", 0, 1)
    # device_map="cuda" means cuda:$LOCAL_RANK to transformers; this machine's one GPU is cuda:0
    model = AutoModelForCausalLM.from_pretrained(args.work, device_map={"": "cuda:0"}, dtype=torch.float32)
    for param in model.parameters():
        dist.broadcast(param.data, src=0)
    torch.cuda.synchronize()
    dist.destroy_process_group()
    return {"device": str(next(model.parameters()).device),
            "all_finite": all(bool(torch.isfinite(p).all()) for p in model.parameters())}


def record_stream(args):
    """Whether a freed block is handed out again while a side stream still
    uses it, case by case in this order: a warm-up (an ordinary tensor with
    record_stream: the first launches load their kernels on the host, which
    can outlast the side stream's sleep, and then the block is rightly free;
    not judged), a parameter built by init (skipped, so tagged, under the
    preload) with record_stream (must not be), an ordinary tensor with
    record_stream (must not be) and without (is: the check can tell)."""
    import torch
    import torch.nn as nn
    elements = 16 << 20

    def reused(make, record):
        tensor = make()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(2_000_000_000)  # about a second of GPU time on the side stream
            (tensor * 2).sum()
        if record:
            tensor.record_stream(side)
        address = tensor.data_ptr()
        del tensor
        again = torch.empty(elements, device="cuda")
        result = again.data_ptr() == address
        torch.cuda.synchronize()
        return result

    def parameter():
        param = nn.Parameter(torch.empty(elements, device="cuda"))
        nn.init.ones_(param)  # skipped under the preload: its storage is tagged
        return param.data

    def plain():
        return torch.empty(elements, device="cuda")

    cases = [("warm_up", plain, True), ("parameter_with_record_stream", parameter, True),
             ("plain_with_record_stream", plain, True), ("plain_without_record_stream", plain, False)]
    return {name: reused(make, record) for name, make, record in cases}


def probe_gpu(args):
    import torch
    available = torch.cuda.is_available()
    return {"torch": torch.__version__, "cuda": torch.version.cuda, "available": available,
            "device": torch.cuda.get_device_name(0) if available else None,
            "count": torch.cuda.device_count() if available else 0}


CHILDREN = {f.__name__: f for f in (init_on_cuda, nccl_broadcast, two_ranks_gloo, save_checkpoint, from_pretrained,
                                     record_stream, fsdp1_sync_module_states, lightning_fsdp, bf16_checkpoint,
                                     accelerate_fsdp2_bf16, two_gpus_nccl, fsdp1_hybrid_shard, probe_gpu)}


# ---- the parent: runs the children, judges, prints ------------------------

class Runner:
    def __init__(self, preload, work):
        self.preload, self.work = preload, work
        self.gpus = 0

    def start(self, child, preload, name, **variables):
        env = without_policy(os.environ)
        env.update(OMP_NUM_THREADS="1", MASTER_PORT=str(variables.pop("port", free_port())))
        if preload:
            env.update(LD_PRELOAD=self.preload, FSDPSKIP="on", LOCAL_RANK="1",
                       FSDPSKIP_REPORT=os.path.join(self.work, name + ".report.json"))
        env.update({k: str(v) for k, v in variables.items()})
        return subprocess.Popen([sys.executable, HERE, "--child", child, "--work", self.work], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    @staticmethod
    def finish(process, timeout=240):
        out, err = process.communicate(timeout=timeout)
        lines = [line for line in out.splitlines() if line.startswith("{")]
        if process.returncode != 0 or not lines:
            raise RuntimeError("exit %d: %s" % (process.returncode, " | ".join(
                line for line in err.strip().splitlines()[-12:] if line.strip()) or "no output"))
        return json.loads(lines[-1]), err

    def run(self, child, preload, name=None, **variables):
        return self.finish(self.start(child, preload, name or child, **variables))

    def run_ranks(self, child, world):
        """`world` processes of one job under the preload, rank r on local rank r: their results."""
        port = free_port()
        ranks = [self.start(child, True, "%s.%d" % (child, r), port=port, RANK=r, LOCAL_RANK=r, WORLD_SIZE=world)
                 for r in range(world)]
        return [self.finish(p)[0] for p in ranks]

    def report(self, name):
        with open(os.path.join(self.work, name + ".report.json")) as f:
            return json.load(f)


def judge_init_on_cuda(runner):
    plain, _ = runner.run("init_on_cuda", False)
    skipped, _ = runner.run("init_on_cuda", True)
    report = runner.report("init_on_cuda")
    ok = (skipped["cuda_rng"] == plain["cuda_rng"] and skipped["drawn"] == plain["drawn"] and skipped["all_finite"]
          and skipped["filled_zero"] == plain["filled_zero"] and report["storages_skipped"] == 0)
    return ok, ("CUDA generator as without fsdpskip: %s; random inits equal: %s; zero_/fill_ inits as without: %s; "
                "%d storages skipped" % (
                    skipped["cuda_rng"] == plain["cuda_rng"], skipped["drawn"] == plain["drawn"],
                    skipped["filled_zero"] == plain["filled_zero"], report["storages_skipped"])), \
        {"plain": plain, "skipped": skipped, "report": report}


def judge_nccl_broadcast(runner):
    result, _ = runner.run("nccl_broadcast", True, RANK=0, WORLD_SIZE=1)
    report = runner.report("nccl_broadcast")
    ok = report["pending_count"] == 0 and report["storages_skipped"] == 0 and not result["all_zero"]
    return ok, "skipped %d, pending %d, its init kept: %s" % (
        report["storages_skipped"], report["pending_count"], not result["all_zero"]), {"report": report}


def judge_two_ranks_gloo(runner):
    results = runner.run_ranks("two_ranks_gloo", 2)
    report = runner.report("two_ranks_gloo.1")
    ok = all(r["equal_to_rank0"] and r["all_finite"] for r in results) and report["pending_count"] == 0 and \
        report["storages_skipped"] == 0
    return ok, "rank 1 equal to rank 0: %s; skipped %d storages, pending %d" % (
        results[1]["equal_to_rank0"], report["storages_skipped"], report["pending_count"]), {"report": report}


def judge_from_pretrained(runner):
    runner.run("save_checkpoint", False)
    result, _ = runner.run("from_pretrained", True, RANK=0, WORLD_SIZE=1, ACCELERATE_USE_FSDP="true",
                           FSDP_CPU_RAM_EFFICIENT_LOADING="true")
    report = runner.report("from_pretrained")
    # transformers 5 keeps a non-zero local rank's parameters where FSDP will
    # move them from (the CPU) whatever the device_map; 4 honours it.
    ok = result["all_finite"] and report["pending_count"] == 0 and \
        report["storages_skipped"] + report["lazy_zero_calls"] > 0
    return ok, "on %s, finite %s, skipped %d storages, zeroed lazily %d, pending %d" % (
        result["device"], result["all_finite"], report["storages_skipped"], report["lazy_zero_calls"],
        report["pending_count"]), {"result": result, "report": report}


def judge_record_stream(runner):
    plain, _ = runner.run("record_stream", False, "record_stream.plain")
    skipped, _ = runner.run("record_stream", True)
    report = runner.report("record_stream")
    expected = {"parameter_with_record_stream": False, "plain_with_record_stream": False,
                "plain_without_record_stream": True}
    judged = lambda result: {k: v for k, v in result.items() if k in expected}  # noqa: E731
    ok = judged(plain) == expected and judged(skipped) == expected and report["storages_skipped"] >= 1
    return ok, "block reused while the side stream ran, with fsdpskip: %s; without: %s; skipped %d storages" % (
        ", ".join("%s %s" % (k, v) for k, v in skipped.items()), ", ".join("%s %s" % (k, v) for k, v in plain.items()),
        report["storages_skipped"]), {"with": skipped, "without": plain, "report": report}


def judge_fsdp1_sync_module_states(runner):
    result, _ = runner.run("fsdp1_sync_module_states", True, RANK=0, WORLD_SIZE=1)
    report = runner.report("fsdp1_sync_module_states")
    ok = result["all_finite"] and resolved(report)
    return ok, "skipped %d storages, resolved by overwrite %d, by free %d, pending %d, finite %s" % (
        report["storages_skipped"], report["resolved_by_overwrite"], report["resolved_by_free"],
        report["pending_count"], result["all_finite"]), {"result": result, "report": report}


class Skipped(Exception):
    """A step that did not run: the machine cannot run it (`machine_cannot`:
    one GPU where it needs two), which leaves the verdict a pass, or what it
    needs is not installed, which makes the verdict "incomplete": a step
    that did not run is never a pass."""

    def __init__(self, reason, machine_cannot=False):
        super().__init__(reason)
        self.machine_cannot = machine_cannot


def needs(*modules):
    import importlib.util
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise Skipped("skipped: not installed: %s" % " ".join(missing))


def rank1_on_one_device(**variables):
    """World size 1 over NCCL, this process fsdpskip's local rank 1 while
    the launcher's LOCAL_RANK (what frameworks pick their device by) is 0."""
    return dict(RANK=0, WORLD_SIZE=1, LOCAL_RANK=0, FSDPSKIP_LOCAL_RANK=1, MASTER_ADDR="127.0.0.1", **variables)


def resolved(report):
    return report["storages_skipped"] > 0 and report["pending_count"] == 0 and report["loading_ended"] and \
        report.get("storages_never_written", 0) == 0


def judge_lightning_fsdp(runner):
    needs("lightning")
    result, _ = runner.run("lightning_fsdp", True, **rank1_on_one_device())
    report = runner.report("lightning_fsdp")
    return result["all_finite"] and resolved(report), \
        "skipped %d storages, resolved by overwrite %d, pending %d, finite %s" % (
            report["storages_skipped"], report["resolved_by_overwrite"], report["pending_count"],
            result["all_finite"]), {"result": result, "report": report}


def judge_accelerate_fsdp2_bf16(runner):
    needs("accelerate", "transformers")
    runner.run("bf16_checkpoint", False)
    variables = rank1_on_one_device()
    plain, _ = runner.run("accelerate_fsdp2_bf16", False, "accelerate_fsdp2_bf16.plain", **variables)
    skipping, _ = runner.run("accelerate_fsdp2_bf16", True, **variables)
    report = runner.report("accelerate_fsdp2_bf16")
    # Measured whatever fsdpskip changes: world size 1 reads the checkpoint,
    # so what is skipped is at most what prepare() itself makes on the CPU.
    ok = skipping["loss"] == plain["loss"] and report["pending_count"] == 0 and \
        report.get("storages_never_written", 0) == 0
    return ok, ("%s; peak CPU RSS growth through prepare() %.0f MiB without fsdpskip, %.0f MiB with it "
                "(%.2f s, %.2f s); training step's loss equal: %s; skipped %d storages, pending %d" % (
                    skipping["distributed_type"], plain["prepare_rss_growth_bytes"] / 2**20,
                    skipping["prepare_rss_growth_bytes"] / 2**20, plain["prepare_seconds"],
                    skipping["prepare_seconds"], skipping["loss"] == plain["loss"], report["storages_skipped"],
                    report["pending_count"])), {"with": skipping, "without": plain, "report": report}


def judge_two_gpus_nccl(runner):
    if runner.gpus < 2:
        raise Skipped("one GPU: skipped", machine_cannot=True)
    results = runner.run_ranks("two_gpus_nccl", 2)
    report = runner.report("two_gpus_nccl.1")
    ok = all(r["equal_to_rank0"] and r["all_finite"] for r in results) and resolved(report)
    return ok, "rank 1 equal to rank 0: %s; skipped %d storages, pending %d" % (
        results[1]["equal_to_rank0"], report["storages_skipped"], report["pending_count"]), {"report": report}


def judge_fsdp1_hybrid_shard(runner):
    if runner.gpus < 4:
        raise Skipped("fewer than 4 GPUs: skipped", machine_cannot=True)
    results = runner.run_ranks("fsdp1_hybrid_shard", 4)
    reports = [runner.report("fsdp1_hybrid_shard.%d" % r) for r in (1, 2, 3)]
    # Rank 1 sends first where its first sync is the inter-node one: then it
    # must replay every storage it skipped; otherwise it has received rank
    # 0's values before it sends, and has nothing to replay.
    sends_first = results[1]["synced_over"][0] == [1, 3]
    replayed, skipped = reports[0]["storages_replayed"], reports[0]["storages_skipped"]
    ok = all(r["equal_to_rank0"] and r["all_finite"] for r in results) and all(map(resolved, reports)) and \
        replayed == (skipped if sends_first else 0)
    return ok, "every rank equal to rank 0: %s; rank 1 synced over %s, and replayed %d of %d skipped storages; " \
        "pending on ranks 1-3: %s" % (all(r["equal_to_rank0"] for r in results), results[1]["synced_over"], replayed,
                                      skipped, [r["pending_count"] for r in reports]), {"reports": reports}


STEPS = [("a init_on_cuda", judge_init_on_cuda), ("b nccl_broadcast", judge_nccl_broadcast),
         ("c two_ranks_gloo", judge_two_ranks_gloo), ("d from_pretrained", judge_from_pretrained),
         ("e record_stream", judge_record_stream), ("f fsdp1_sync_module_states", judge_fsdp1_sync_module_states),
         ("g lightning_fsdp", judge_lightning_fsdp), ("h accelerate_fsdp2_bf16", judge_accelerate_fsdp2_bf16),
         ("i two_gpus_nccl", judge_two_gpus_nccl), ("j fsdp1_hybrid_shard", judge_fsdp1_hybrid_shard)]


def verdict_of(statuses):
    """"pass" only when every step ran and passed, or the machine cannot run it (n/a)."""
    if "FAIL" in statuses:
        return "fail"
    if "skipped" in statuses:
        return "incomplete (%d steps skipped)" % statuses.count("skipped")
    return "pass"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preload", help="libfsdpskip.so (the plugin beside it)")
    parser.add_argument("--out", default=".")
    parser.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(CHILDREN[args.child](args)))
        return 0

    work = os.path.join(os.path.abspath(args.out), "gpu-check-work")
    os.makedirs(work, exist_ok=True)
    runner = Runner(os.path.abspath(args.preload), work)
    gpu, _ = runner.run("probe_gpu", False)
    runner.gpus = gpu["count"]
    summary = {"torch": gpu["torch"], "cuda": gpu["cuda"], "device": gpu["device"], "steps": []}
    if not gpu["available"]:
        summary["verdict"] = "no GPU"
        print("gpu-check: no GPU: torch %s (CUDA %s) sees no CUDA device; nothing was checked" %
              (gpu["torch"], gpu["cuda"]))
    else:
        for name, judge in STEPS:
            status = "ok"
            try:
                ok, detail, figures = judge(runner)
                status = "ok" if ok else "FAIL"
            except Skipped as reason:
                ok, detail, figures = False, str(reason), {"skipped": str(reason)}
                status = "n/a" if reason.machine_cannot else "skipped"
            except Exception as error:  # a step that cannot run fails, the others still run
                ok, detail, figures = False, "%s: %s" % (type(error).__name__, error), {}
                status = "FAIL"
            summary["steps"].append({"step": name, "ok": ok, "status": status, "detail": detail, "figures": figures})
        summary["verdict"] = verdict_of([s["status"] for s in summary["steps"]])
        width = max(len(s["step"]) for s in summary["steps"])
        print("gpu-check: torch %s, CUDA %s, %s" % (gpu["torch"], gpu["cuda"], gpu["device"]))
        for s in summary["steps"]:
            print("%-*s  %-7s  %s" % (width, s["step"], s["status"], s["detail"]))
        print("verdict: %s" % summary["verdict"])
    with open(os.path.join(args.out, "gpu-check.json"), "w") as f:
        json.dump(summary, f, indent=1)
    return 0 if summary["verdict"] == "pass" else 1


if __name__ == "__main__":
    sys.exit(main())
