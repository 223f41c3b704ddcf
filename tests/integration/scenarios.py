"""Single-process scenarios. Each prints one JSON object of parameter
digests and facts; the tests run it without the preload, on local rank 0 and
on local rank 1, and compare."""
import concurrent.futures
import contextlib
import inspect
import json
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "workloads"))
from measure import digest  # noqa: E402


def describe(model):
    return {name: {"digest": digest(p), "zero": bool((p == 0).all()), "finite": bool(torch.isfinite(p).all())}
            for name, p in model.named_parameters()}


def small_model(**factory):
    return nn.Sequential(nn.Linear(64, 128, **factory), nn.LayerNorm(128, **factory),
                         nn.Embedding(100, 16, **factory), nn.Conv2d(3, 8, 3, **factory))


def meta_to_empty_reset():
    """FSDP1's default path: built on meta, to_empty, reset_parameters()."""
    torch.manual_seed(0)
    model = small_model(device="meta").to_empty(device="cpu")
    for module in model.modules():
        if hasattr(module, "reset_parameters"):
            module.reset_parameters()
    return describe(model)


def hf_init_weights():
    """transformers' _init_weights on .data."""
    return describe(hf_model())


def hf_model():
    torch.manual_seed(0)
    model = small_model()
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Conv2d)):
            module.weight.data.normal_(mean=0.0, std=0.02)
            module.bias.data.zero_()
        elif isinstance(module, nn.Embedding):
            module.weight.data.normal_(mean=0.0, std=0.02)
        elif isinstance(module, nn.LayerNorm):
            module.weight.data.fill_(1.0)
            module.bias.data.zero_()
    return model


INITS = {
    "kaiming_uniform_": lambda p: nn.init.kaiming_uniform_(p, a=5 ** 0.5),
    "kaiming_normal_": nn.init.kaiming_normal_,
    "xavier_uniform_": nn.init.xavier_uniform_,
    "xavier_normal_": nn.init.xavier_normal_,
    "constant_": lambda p: nn.init.constant_(p, 0.5),
    "ones_": nn.init.ones_,
    "zeros_": nn.init.zeros_,
    "normal_": nn.init.normal_,
    "uniform_": nn.init.uniform_,
    "trunc_normal_": lambda p: nn.init.trunc_normal_(p, std=0.02),
}


def generators_after_inits():
    """Every nn.init function (trunc_normal_ while it is a chain of kernels:
    up to torch 2.11) on fp32, bf16 and fp64 parameters, the module defaults,
    transformers' _init_weights, and inits drawing from a passed generator
    (a whole parameter and a strided view of one): where the default and the
    passed generator stand afterwards, and what each draws next."""
    chain = "erfinv" in inspect.getsource(nn.init._no_grad_trunc_normal_)
    kept = [hf_model(), small_model()]  # hf_model seeds the default generator
    own = torch.Generator().manual_seed(3)
    for dtype in (torch.float32, torch.bfloat16, torch.float64):
        for name, init in INITS.items():
            if name != "trunc_normal_" or (chain and dtype != torch.bfloat16):
                kept.append(nn.Parameter(torch.empty(33, 47, dtype=dtype)))
                init(kept[-1])
        kept.append(nn.Parameter(torch.empty(40, 41, dtype=dtype)))
        kept[-1].data.normal_(generator=own)
        kept[-1].data[:, :5].uniform_(generator=own)
    facts = {"default": digest(torch.get_rng_state()), "passed": digest(own.get_state()),
             "default_next": digest(torch.rand(16)), "passed_next": digest(torch.rand(16, generator=own))}
    # What a skipping rank's generator owes is dropped by a reseed (to the very
    # state it stood at) and by a restored state, and an unseen draw (randperm)
    # leaves it where it would be, though its own values may differ.
    for name, between in (("reseeded", lambda: torch.manual_seed(11)),
                          ("restored", lambda: torch.set_rng_state(saved)),
                          ("after_randperm", lambda: torch.randperm(5000))):
        torch.manual_seed(11)
        saved = torch.get_rng_state()
        kept.append(nn.Parameter(torch.empty(700, 900)))
        nn.init.normal_(kept[-1])
        between()
        facts[name] = digest(torch.get_rng_state())
    return facts


def nn_init():
    torch.manual_seed(0)
    params = nn.ParameterDict({name: nn.Parameter(torch.empty(32, 48)) for name in INITS})
    for name, init in INITS.items():
        init(params[name])
    return describe(params)


def views():
    """Every view of a parameter's storage is covered."""
    torch.manual_seed(0)
    p = nn.Parameter(torch.empty(64, 64))  # 16 KiB: pages of its own, so skipped
    p.data.normal_()
    p.data[:, :8].uniform_()
    p.view(-1)[:4].detach().zero_()
    p.detach().t().fill_(3.0)
    return describe(nn.ParameterList([p]))


def not_parameters():
    """Noise, buffers and activations are never touched: bitwise as without the preload."""
    p = nn.Parameter(torch.empty(8, 8))  # a tag exists in this process
    nn.init.normal_(p)
    torch.manual_seed(5)
    noise = torch.randn(1000)
    buffer = torch.empty(64).fill_(2.5)
    uniform = torch.empty(64).uniform_(-1, 1)
    zeros = torch.empty(1 << 20).zero_()  # lazily zeroed on rank 1, still exact
    linear = nn.Linear(8, 8)
    with torch.no_grad():
        activation = torch.relu(linear.weight @ noise[:8])
    return {"noise": digest(noise), "buffer": digest(buffer), "uniform": digest(uniform), "zeros": digest(zeros),
            "activation_finite": bool(torch.isfinite(activation).all())}


@contextlib.contextmanager
def one_rank_group():
    """A gloo process group of this process alone (world size 1)."""
    import tempfile
    import torch.distributed as dist
    with tempfile.TemporaryDirectory() as directory:
        dist.init_process_group("gloo", store=dist.FileStore(os.path.join(directory, "store"), 1), rank=0,
                                world_size=1)
        try:
            yield dist
        finally:
            dist.destroy_process_group()


def sync_then_train(dist, policy):
    """Rank 0's values broadcast into `policy`, then training's first
    gradient all-reduce (4 KiB: more than a barrier). Returns the tensors
    the collectives were given: the caller holds them until the group is
    destroyed, because torch 2.6's gloo worker can otherwise drop the last
    reference to one of them while destroy_process_group holds the GIL and
    joins it, and hang (docs/limits.md)."""
    given = [param.data for param in policy.parameters()]
    for tensor in given:
        dist.broadcast(tensor, 0)
    given.append(torch.ones(1024))
    dist.all_reduce(given[-1])
    return given


def every_row():
    """Each row of hooks.def that this torch defines, reached through torch's
    own API on tensors that are not parameters, so nothing is skipped: the
    real originals through the preload's forwarders (tests/unit/
    test_forwarder_shapes.cc checks the forwarders against stand-ins). The
    values are checked here and compared with the run without the preload."""
    out = {}

    def fresh():
        return torch.arange(1.0, 7.0).reshape(2, 3)

    t = fresh()
    assert t.normal_(5.0, 0.0) is t and bool((t == 5.0).all())
    t = fresh()
    assert t.uniform_(2.0, 2.0) is t and bool((t == 2.0).all())
    for kernel in ("normal_", "uniform_"):
        default_before = torch.get_rng_state()
        generator = torch.Generator().manual_seed(7)
        generator_before = generator.get_state()
        t = getattr(fresh(), kernel)(0.0, 1.0, generator=generator)
        # The generator passed is the one that drew: the default did not move.
        assert torch.equal(torch.get_rng_state(), default_before) and not torch.equal(generator.get_state(),
                                                                                       generator_before)
        out[kernel + "_generator"] = digest(t)
    t = fresh()
    assert t.zero_() is t and bool((t == 0).all())
    t = fresh()
    assert t.fill_(3.5) is t and bool((t == 3.5).all())
    t = fresh()
    assert t.fill_(torch.tensor(-4.5)) is t and bool((t == -4.5).all())
    for non_blocking in (False, True):
        t, src = fresh(), torch.full((2, 3), 0.25)
        assert t.copy_(src, non_blocking=non_blocking) is t and torch.equal(t, src)
    own = torch.Generator().manual_seed(3)
    out["randperm"] = digest(torch.randperm(10, generator=own).float())  # CPUGeneratorImpl::random
    out["randint"] = digest(torch.randint(0, 1 << 40, (4,), generator=own).double())  # random64
    t = fresh()
    assert t.requires_grad_(True).requires_grad and not t.requires_grad_(False).requires_grad
    p = nn.Parameter(torch.zeros(3))
    p.data = torch.ones(6)
    assert p.shape == (6,) and bool((p == 1).all()) and p.requires_grad
    x, y = torch.linspace(-0.9, 0.9, 7), torch.linspace(-3.0, 3.0, 7)
    o = torch.empty(7)
    out["erfinv"] = digest(torch.erfinv(x, out=o))
    out["mul"] = digest(torch.mul(x, y, out=o))
    assert torch.equal(torch.add(x, y, alpha=2, out=o), x + 2 * y)
    assert torch.equal(torch.clamp(y, -1.5, 2.0, out=o), torch.tensor([-1.5, -1.5, -1.0, 0.0, 1.0, 2.0, 2.0]))
    mask = torch.empty(7, dtype=torch.bool)
    for name, compare, expected in (("lt", torch.lt, [1, 1, 1, 0, 0, 0, 0]), ("le", torch.le, [1, 1, 1, 1, 0, 0, 0]),
                                    ("gt", torch.gt, [0, 0, 0, 0, 1, 1, 1]), ("ge", torch.ge, [0, 0, 0, 1, 1, 1, 1])):
        assert compare(y, 0.0, out=mask).tolist() == [bool(e) for e in expected], name
    low, high = y < -2.0, y > 2.0
    assert torch.bitwise_or(low, high, out=mask).tolist() == [True, False, False, False, False, False, True]
    assert bool(mask.any()) and not bool(torch.zeros(7, dtype=torch.bool).any())
    # gloo's broadcast returns intrusive_ptr<Work> by value: a forwarder that
    # put it anywhere but where the platform's ABI says would crash here.
    with one_rank_group() as dist:
        t = fresh()
        work = dist.broadcast(t, 0, async_op=True)
        work.wait()
        assert work.is_completed() and torch.equal(t, fresh())
    return out


def rejection_sampling():
    """torch >= 2.12's trunc_normal_ test written out (so torch 1.13 runs it
    too): comparisons, `|` and any() of a skipped parameter are answered from
    its zeros; the same on ordinary tensors, with a bound that 0 breaks, and
    on a mask written after it was made, run as ever."""
    torch.manual_seed(0)
    p = nn.Parameter(torch.empty(512, 512))
    noise = torch.randn(512, 512)
    with torch.no_grad():
        p.normal_(0, 0.02)
        mask = (p < -2.0) | (p > 2.0)
        written = (p <= -1.0) | (p >= 1.0)
        written[3, 3] = True
        noise_mask = (noise < -2.0) | (noise > 2.0)
        return {"inside_any": bool(mask.any()), "mask": digest(mask), "outside_all": bool((p < 0.5).all()),
                "nan_any": bool((p > float("nan")).any()), "written_any": bool(written.any()),
                "written": digest(written), "noise_mask": digest(noise_mask), "noise_any": bool(noise_mask.any()),
                "param_zero": bool((p == 0).all())}


def errors():
    """torch's own argument checks, skipped or not, reach Python unchanged:
    on a parameter large enough to be skipped, already skipped once, and on
    a skipped conversion of it whose chain step's kernel may refuse half
    when it runs (erfinv_ in torch 1.13)."""
    torch.manual_seed(0)
    p = nn.Parameter(torch.empty(4096))
    plain = torch.empty(4096)
    calls = {
        "skipped_first": lambda t: t.data.normal_(),
        "normal_negative_std": lambda t: t.data.normal_(0.0, -1.0),
        "uniform_from_gt_to": lambda t: t.data.uniform_(2.0, 1.0),
        "fill_non_scalar_tensor": lambda t: t.data.fill_(torch.ones(2)),
        "copy_bad_shape": lambda t: t.data.copy_(torch.ones(3)),
        "mul_by_many": lambda t: t.data.mul_(torch.ones(3)),
        "erfinv_half": lambda t: t.data.half().erfinv_().sum().item(),
        "inplace_on_leaf_requiring_grad": lambda t: t.normal_(),
    }
    out = {}
    for target_name, target in (("parameter", p), ("plain", plain)):
        for name, call in calls.items():
            try:
                call(target)
                out[target_name + "." + name] = "no error"
            except Exception as error:  # the type and the text must be torch's
                out[target_name + "." + name] = "%s: %s" % (type(error).__name__, str(error).splitlines()[0])
    return out


def threads():
    """Loaders initialise in thread pools."""
    torch.manual_seed(0)
    def build(i):
        p = nn.Parameter(torch.empty(64, 64))
        nn.init.normal_(p)
        return p

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        params = list(pool.map(build, range(200)))
    # Each init draws its own run of the generator's outputs, in whatever
    # order the threads took it: the runs, not their order, are the result.
    return {"draws": sorted(digest(p) for p in params), "count": len(params)}


def fork():
    """A fork()ed child (DataLoader worker) inherits the tags and reports nothing."""
    p = nn.Parameter(torch.empty(4096))
    nn.init.normal_(nn.Parameter(torch.empty(2048)))  # the parent skips one: its summary is printed
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read)
        nn.init.normal_(p)
        fresh = torch.empty(4096).normal_()
        os.write(write, json.dumps({"param_zero": bool((p == 0).all()),
                                    "fresh_nonzero": bool((fresh != 0).any())}).encode())
        sys.exit(0)  # a normal exit: atexit handlers run in the child too
    os.close(write)
    result = json.loads(os.read(read, 4096))
    _, status = os.waitpid(child, 0)
    result["child_status"] = status
    return result


def reuse():
    """A freed parameter's address, handed out again, is a stranger."""
    warm = nn.Parameter(torch.empty(8))
    n = 16 << 20  # 64 MiB: mmap, the kernel hands the range back
    keep = []  # misses stay mapped, so that a later round finds another range
    for _ in range(20):  # a mapping made between the free and the next may take the range: try again
        p = nn.Parameter(torch.empty(n))
        address = p.data_ptr()
        del p
        t = torch.empty(n)
        if t.data_ptr() == address:
            t.normal_()
            return {"repeated": True, "nonzero_after_normal": bool((t != 0).any()), "warm": warm.numel()}
        keep.append(t)
    return {"repeated": False}


ACCELERATE_FSDP = ("ACCELERATE_USE_FSDP", "FSDP_CPU_RAM_EFFICIENT_LOADING")


# accelerate's enable_/disable_fsdp_ram_efficient_loading(), as written in
# accelerate 1.14 (the torch 1.13 suite has no accelerate): os.environ, after
# start-up.
def enable_fsdp_ram_efficient_loading():
    if "ACCELERATE_USE_FSDP" not in os.environ:
        os.environ["ACCELERATE_USE_FSDP"] = "True"
    os.environ["FSDP_CPU_RAM_EFFICIENT_LOADING"] = "True"


def disable_fsdp_ram_efficient_loading():
    os.environ["FSDP_CPU_RAM_EFFICIENT_LOADING"] = "False"


def environ_set_before_loading():
    for name in ACCELERATE_FSDP:
        os.environ[name] = "true"
    return hf_init_weights()


def environ_set_and_removed():
    for name in ACCELERATE_FSDP:
        os.environ[name] = "true"
    for name in ACCELERATE_FSDP:
        del os.environ[name]
    return hf_init_weights()


_alive_at_exit = []


def environ_switched():
    """On for a first model, off for a second (seeded, initialised as usual),
    on again for a third."""
    enable_fsdp_ram_efficient_loading()
    first = hf_model()
    disable_fsdp_ram_efficient_loading()
    second = hf_model()
    enable_fsdp_ram_efficient_loading()
    third = hf_model()
    _alive_at_exit.extend((first, second, third))  # frees while exiting resolve nothing
    return {"first": describe(first), "second": describe(second), "third": describe(third)}


def unsynced_model_then_training():
    """A job of one rank (world size 1, FSDPSKIP_LOCAL_RANK=1): a policy that
    a broadcast syncs and a reference model that nothing syncs, then
    training's first gradient all-reduce. Prints whether training went on."""
    with one_rank_group() as dist:
        policy, reference = hf_model(), hf_model()
        held = sync_then_train(dist, policy)  # noqa: F841 (until the group is destroyed)
    return {"trained": True, "reference_zero": all(bool((p == 0).all()) for p in reference.parameters())}


def never_written_placeholders():
    """A job of one rank (world size 1, FSDPSKIP_LOCAL_RANK=1): a policy a
    broadcast syncs, and an unsynced module of placeholders made four ways
    before training's first gradient all-reduce: torch.empty (94 MiB, never
    written: what transformers <= 5.5's empty_like left where no data came),
    torch.load (arrived with data), torch.frombuffer (not the CPU
    allocator's) and torch.zeros (written, with zeros)."""
    import io
    with one_rank_group() as dist:
        policy = hf_model()
        saved = io.BytesIO()
        torch.save(torch.arange(1 << 20, dtype=torch.float32), saved)
        saved.seek(0)
        placeholders = nn.ParameterDict({
            "empty": nn.Parameter(torch.empty(32000, 768)),  # never_written_placeholders: the empty one
            "loaded": nn.Parameter(torch.load(saved)),
            "from_buffer": nn.Parameter(torch.frombuffer(bytearray(4 << 20), dtype=torch.float32)),
            "zeros": nn.Parameter(torch.zeros(1 << 20)),
        })
        held = sync_then_train(dist, policy)  # noqa: F841 (until the group is destroyed)
    return {"trained": True, "shapes": {name: list(p.shape) for name, p in placeholders.items()}}


def _batch_sum(batch):
    return float(batch.sum())


def dataloader_workers():
    """A rank whose DataLoader starts spawned workers: they inherit the active
    environment and import torch, but make no parameter."""
    import torch.utils.data as data
    torch.manual_seed(0)  # the plugin loads here, before any parameter's storage is made
    p = nn.Parameter(torch.empty(4096))  # a page: skipped
    nn.init.normal_(p)
    loader = data.DataLoader(torch.arange(12.0).reshape(6, 2), batch_size=2, num_workers=3,
                             multiprocessing_context="spawn")
    return {"sums": [_batch_sum(batch) for batch in loader], "param_zero": bool((p == 0).all())}


if __name__ == "__main__":
    print(json.dumps(globals()[sys.argv[1]](), sort_keys=True))
