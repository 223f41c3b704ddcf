"""One rank of a real-framework loading job (torch 2.x with transformers and
accelerate), writing rank<N>.json:
- `save DIR` writes a small Llama checkpoint;
- `load ...` loads it as accelerate's RAM-efficient FSDP loading does and
  syncs from rank 0 (DDP's constructor, or FSDP2's set_model_state_dict
  broadcasting rank 0's full state dict);
- `titan` is torchtitan's flow: the model built on meta on every rank,
  fully_shard, to_empty, init_weights, then rank 0's checkpoint broadcast
  into the shards;
- `accelerate` loads with from_pretrained, then hands the model to
  accelerate's own FSDP2 loader (fsdp2_load_full_state_dict);
- `switch`: accelerate's enable_fsdp_ram_efficient_loading(), a load,
  disable_fsdp_ram_efficient_loading(), a second model initialised as usual;
- `models`: several models in one process, each synced before the next,
  then a layer made after the syncs.
`--environ` says how accelerate's FSDP variables reach `load`: in the launch
environment, assigned through os.environ at the top of the script, or
written by transformers' TrainingArguments from its fsdp_config."""
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "workloads"))
import launch  # noqa: E402
from measure import digest, gathered, measured, resident_fraction  # noqa: E402


ACCELERATE_FSDP = ("ACCELERATE_USE_FSDP", "FSDP_CPU_RAM_EFFICIENT_LOADING")


def llama_config():
    from transformers import LlamaConfig
    return LlamaConfig(hidden_size=512, intermediate_size=1376, num_hidden_layers=8, num_attention_heads=8,
                       num_key_value_heads=8, vocab_size=32000, tie_word_embeddings=False)


def mistral_config():
    from transformers import MistralConfig
    return MistralConfig(hidden_size=384, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=6,
                         num_key_value_heads=2, vocab_size=16000, tie_word_embeddings=True)


def save(directory, kind):
    from transformers import LlamaForCausalLM, MistralForCausalLM
    torch.manual_seed(0)
    model = LlamaForCausalLM(llama_config()) if kind == "llama" else MistralForCausalLM(mistral_config())
    model.save_pretrained(directory)


def facts(model, seconds, growth):
    """What the tests compare, once the model holds rank 0's values."""
    digests = {name: digest(p) for name, p in model.named_parameters()}
    return {"build_seconds": seconds, "rss_growth_bytes": growth,
            "model_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
            "equal_to_rank0": all(d == gathered(digests)[0] for d in gathered(digests)),
            "all_finite": all(bool(torch.isfinite(p).all()) for p in model.parameters())}


def load(args):
    from transformers import LlamaForCausalLM, TrainingArguments
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
    dist.barrier()
    if args.environ == "training-args":  # writes FSDP_CPU_RAM_EFFICIENT_LOADING from its fsdp_config
        TrainingArguments(output_dir=args.out, fsdp="full_shard", fsdp_config={"cpu_ram_efficient_loading": True},
                          use_cpu=True, report_to=[])
    model, seconds, growth = measured(lambda: LlamaForCausalLM.from_pretrained(args.directory, dtype=torch.float32))
    if args.sync == "ddp":
        nn.parallel.DistributedDataParallel(model)
    else:  # FSDP2's loader: rank 0's full state dict, broadcast into every rank
        full = model.state_dict() if dist.get_rank() == 0 else {}
        set_model_state_dict(model, full, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    return model, dict(facts(model, seconds, growth),
                       variables={name: os.environ.get(name) for name in ACCELERATE_FSDP})


def switch(args):
    from accelerate.utils import disable_fsdp_ram_efficient_loading, enable_fsdp_ram_efficient_loading
    from transformers import LlamaForCausalLM
    enable_fsdp_ram_efficient_loading()
    first, seconds, growth = measured(lambda: LlamaForCausalLM.from_pretrained(args.directory, dtype=torch.float32))
    disable_fsdp_ram_efficient_loading()
    torch.manual_seed(7)
    second = LlamaForCausalLM(llama_config())  # initialised as usual, on every rank
    nn.parallel.DistributedDataParallel(first)
    return (first, second), {"first": facts(first, seconds, growth),
                             "second_digests": {name: digest(p) for name, p in second.named_parameters()}}


def models(args):
    """Three models in one process under the launch environment's variables,
    each synced by DDP before the next: two from_pretrained checkpoints
    (transformers 5: zeros_like placeholders, no statement needed), then one
    built from its config (torch's and transformers' own inits) after
    accelerate's enable_fsdp_ram_efficient_loading() states that a loading
    begins. Then a seeded layer made after the syncs, with no statement.
    Each model's resident fraction right after loading is kept, to compare
    with the same model loaded alone (--only)."""
    from accelerate.utils import enable_fsdp_ram_efficient_loading
    from transformers import AutoModelForCausalLM, LlamaForCausalLM
    kept, result = [], {}
    builds = {"llama": lambda: AutoModelForCausalLM.from_pretrained(args.directory, dtype=torch.float32),
              "mistral": lambda: AutoModelForCausalLM.from_pretrained(args.second, dtype=torch.float32),
              "llama_from_config": lambda: (enable_fsdp_ram_efficient_loading(), LlamaForCausalLM(llama_config()))[1]}
    for name, build in builds.items():
        if args.only and name not in args.only:
            continue
        model, seconds, growth = measured(build)
        # Before the sync writes it: what the placeholders hold of RAM, on
        # whatever memory they landed (an earlier model's sync freed some).
        resident = resident_fraction(model.parameters())
        nn.parallel.DistributedDataParallel(model)
        result[name] = dict(facts(model, seconds, growth), resident_after_loading=resident)
        if not args.drop:
            kept.append(model)
        del model  # --drop: its memory goes back to the allocator, in memory, for the next model to land on
    torch.manual_seed(123)
    head = nn.Linear(512, 1000)
    result["late_layer_equal"] = len(set(gathered(digest(head.weight)))) == 1
    result["late_layer_nonzero"] = bool((head.weight != 0).any())
    return kept, result


class TitanBlock(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.attention = nn.Linear(dim, dim, bias=False)
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.norm = nn.LayerNorm(dim)

    def init_weights(self, std):
        for linear in (self.attention, self.w1, self.w2):
            nn.init.trunc_normal_(linear.weight, mean=0.0, std=std)
        self.norm.reset_parameters()


class Titan(nn.Module):
    """torchtitan's shape: embedding, blocks, norm, output; init_weights()
    does what its models do (normal_ embedding, trunc_normal_ linears)."""

    def __init__(self, vocab=8000, dim=256, hidden=704, layers=4):
        super().__init__()
        self.embedding = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(TitanBlock(dim, hidden) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.output = nn.Linear(dim, vocab, bias=False)

    def init_weights(self):
        nn.init.normal_(self.embedding.weight)
        for layer in self.layers:
            layer.init_weights(0.02)
        self.norm.reset_parameters()
        nn.init.trunc_normal_(self.output.weight, std=0.02)


def shard(model, layers):
    from torch.distributed.fsdp import fully_shard
    for layer in layers:
        fully_shard(layer)
    fully_shard(model)


def titan(args):
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
    with torch.device("meta"):
        model = Titan()
    shard(model, model.layers)
    model.to_empty(device="cpu")
    start = time.perf_counter()
    with torch.no_grad():
        model.init_weights()
    seconds = time.perf_counter() - start
    # Rank 0's checkpoint: a differently seeded model it alone builds.
    if dist.get_rank() == 0:
        torch.manual_seed(1)
        full = Titan().state_dict()
        expected = {name: digest(t) for name, t in full.items()}
    else:
        full, expected = {}, None
    set_model_state_dict(model, full, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    expected = gathered(expected)[0]
    digests = {name: digest(p) for name, p in model.named_parameters()}
    return model, {"init_seconds": seconds, "equal_to_rank0": digests == {k: expected[k] for k in digests},
                   "all_finite": all(bool(torch.isfinite(p.full_tensor()).all()) for p in model.parameters())}


def accelerate_load(args):
    from accelerate import Accelerator
    from accelerate.utils.fsdp_utils import fsdp2_load_full_state_dict
    from transformers import LlamaForCausalLM
    model, _, growth = measured(lambda: LlamaForCausalLM.from_pretrained(args.directory, dtype=torch.float32))
    model_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    # With ACCELERATE_USE_FSDP set, Accelerator refuses a CPU-only machine
    # (test_frameworks shows it); without it, it gives the process state the
    # FSDP2 loader needs. fsdpskip decided at process start, from the full set.
    os.environ.pop("ACCELERATE_USE_FSDP")
    accelerator = Accelerator(cpu=True)
    expected = {name: digest(p) for name, p in model.named_parameters()} if dist.get_rank() == 0 else None
    full = model.state_dict() if accelerator.is_main_process else {}
    # What accelerate's fsdp2_prepare_model does under cpu_ram_efficient_loading.
    model = model.to(torch.device("meta"))
    shard(model, model.model.layers)
    fsdp2_load_full_state_dict(accelerator, model, full)
    expected = gathered(expected)[0]
    digests = {name: digest(p) for name, p in model.named_parameters()}
    return model, {"equal_to_rank0": digests == {k: expected[k] for k in digests},
                   "all_finite": all(bool(torch.isfinite(p.full_tensor() if hasattr(p, "full_tensor") else p).all())
                                     for p in model.parameters()),
                   "placeholders_committed": growth > 0.5 * model_bytes}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("command", choices=("save", "load", "titan", "accelerate", "switch", "models"))
    parser.add_argument("--directory")
    parser.add_argument("--second", help="models: a second checkpoint")
    parser.add_argument("--drop", action="store_true", help="models: each model freed once synced and measured")
    parser.add_argument("--only", nargs="+", choices=("llama", "mistral", "llama_from_config"),
                        help="models: these alone, in a process of their own")
    parser.add_argument("--kind", choices=("llama", "mistral"), default="llama", help="save: the architecture")
    parser.add_argument("--environ", choices=("launch", "python", "training-args"), default="launch")
    parser.add_argument("--sync", choices=("ddp", "fsdp2"), default="ddp")
    parser.add_argument("--out")
    args = parser.parse_args()
    if args.command == "save":
        return save(args.directory, args.kind)
    if args.environ == "python":  # as training scripts do at their top
        for name in ACCELERATE_FSDP:
            os.environ[name] = "true"
    torch.set_num_threads(1)
    import transformers  # noqa: F401  imports done before anything is timed
    dist.init_process_group("gloo")
    commands = {"load": load, "titan": titan, "accelerate": accelerate_load, "switch": switch, "models": models}
    model, result = commands[args.command](args)
    result["rank"] = dist.get_rank()
    with open(os.path.join(args.out, "rank%d.json" % dist.get_rank()), "w") as out:
        json.dump(result, out)
    launch.end_rank()


if __name__ == "__main__":
    main()
