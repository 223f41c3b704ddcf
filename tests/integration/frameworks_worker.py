"""One rank of a real-framework loading job (torch 2.x with transformers and
accelerate): `save DIR` writes a small Llama checkpoint; `load ...` loads it
as accelerate's RAM-efficient FSDP loading does, syncs from rank 0 (DDP's
constructor, or FSDP2's set_model_state_dict broadcasting rank 0's full state
dict), and writes rank<N>.json."""
import argparse
import hashlib
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn


def rss_kib(field):
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(field + ":"))


def digest(t):
    t = t.full_tensor() if hasattr(t, "full_tensor") else t
    return hashlib.sha1(t.detach().contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()


def llama_config():
    from transformers import LlamaConfig
    return LlamaConfig(hidden_size=512, intermediate_size=1376, num_hidden_layers=8, num_attention_heads=8,
                       num_key_value_heads=8, vocab_size=32000, tie_word_embeddings=False)


def save(directory):
    from transformers import LlamaForCausalLM
    torch.manual_seed(0)
    LlamaForCausalLM(llama_config()).save_pretrained(directory)


def gathered(value):
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, value)
    return everyone


def load(args):
    from transformers import LlamaForCausalLM
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
    dist.barrier()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = rss_kib("VmRSS")
    start = time.perf_counter()
    model = LlamaForCausalLM.from_pretrained(args.directory, dtype=torch.float32)
    seconds = time.perf_counter() - start
    growth = (rss_kib("VmHWM") - before) * 1024
    if args.sync == "ddp":
        nn.parallel.DistributedDataParallel(model)
    else:  # FSDP2's loader: rank 0's full state dict, broadcast into every rank
        full = model.state_dict() if dist.get_rank() == 0 else {}
        set_model_state_dict(model, full, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    digests = {name: digest(p) for name, p in model.named_parameters()}
    return model, {"build_seconds": seconds, "rss_growth_bytes": growth,
                   "model_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
                   "equal_to_rank0": all(d == gathered(digests)[0] for d in gathered(digests)),
                   "all_finite": all(bool(torch.isfinite(p).all()) for p in model.parameters())}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("command", choices=("save", "load"))
    parser.add_argument("--directory")
    parser.add_argument("--sync", choices=("ddp", "fsdp2"), default="ddp")
    parser.add_argument("--out")
    args = parser.parse_args()
    if args.command == "save":
        return save(args.directory)
    torch.set_num_threads(1)
    import transformers  # noqa: F401  imports done before anything is timed
    dist.init_process_group("gloo")
    model, result = load(args)
    result["rank"] = dist.get_rank()
    with open(os.path.join(args.out, "rank%d.json" % dist.get_rank()), "w") as out:
        json.dump(result, out)
    # Every rank has written its results. No destroy_process_group(): on
    # torch 2.6 it can hang on rank 0 once the peer has gone (seen without
    # fsdpskip); the process group ends with the process.
    dist.barrier()


if __name__ == "__main__":
    main()
