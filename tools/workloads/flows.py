"""One rank of a real framework's training flow, 2 ranks on CPU (gloo), as a
user runs it: every rank builds the model (initialising it), the framework
hands rank 0's values to the others, then a few optimizer steps. Writes
rank<N>.json: rank 1's build time and peak RSS growth, whether every rank
held rank 0's values after the sync, each step's loss (exact, as hex) and a
digest of the final parameters, so that a run under fsdpskip can be compared
bitwise with one without it. Nothing is reseeded after the build: a skipped
init advances the generator it would have drawn from, so the batches drawn
after it are the ones drawn without fsdpskip.

Used by tests/integration/test_training_flows.py (the CI subset) and
tools/frameworks/run (every flow, figures for the README)."""
import argparse
import hashlib
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import launch  # noqa: E402
from measure import digest, gathered, measured  # noqa: E402

STEPS = 4
BATCH, TOKENS, VOCAB = 2, 32, 16000


def llama_config():
    """An 11.4M-parameter Llama (43.3 MiB fp32); dropout 0, as Llama's default."""
    from transformers import LlamaConfig
    return LlamaConfig(hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=4,
                       num_key_value_heads=4, vocab_size=VOCAB, tie_word_embeddings=False)


def parameter_digests(model):
    return {name: digest(p) for name, p in model.named_parameters()}


def combined(digests):
    return hashlib.sha1(json.dumps(sorted(digests.items())).encode()).hexdigest()


def batches(vocab):
    return [torch.randint(0, vocab, (BATCH, TOKENS)) for _ in range(STEPS)]


def adamw(model):
    return torch.optim.AdamW(model.parameters(), lr=1e-3)


def train(model, optimizer, backward=lambda loss: loss.backward()):
    """STEPS optimizer steps on random tokens; each step's loss, exactly."""
    losses = []
    for input_ids in batches(VOCAB):
        optimizer.zero_grad(set_to_none=False)
        loss = model(input_ids=input_ids, labels=input_ids).loss
        backward(loss)
        optimizer.step()
        losses.append(float(loss.detach()).hex())
    return losses


def ddp_from_config():
    """Pretraining from scratch: Model(config) on every rank, DDP's
    constructor broadcasts rank 0's parameters."""
    from transformers import LlamaForCausalLM
    model, seconds, growth = measured(lambda: LlamaForCausalLM(llama_config()))
    synced = nn.parallel.DistributedDataParallel(model)
    return model, seconds, growth, lambda: train(synced, adamw(model))


def fsdp2_broadcast():
    """FSDP2: Model(config) on every rank, fully_shard, then rank 0's full
    state dict broadcast into the shards (set_model_state_dict with
    broadcast_from_rank0; LLaMA-Factory's init_on_rank0)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
    from torch.distributed.fsdp import fully_shard
    from transformers import LlamaForCausalLM
    model, seconds, growth = measured(lambda: LlamaForCausalLM(llama_config()))
    full = {name: t.clone() for name, t in model.state_dict().items()} if dist.get_rank() == 0 else {}
    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)
    set_model_state_dict(model, full, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    return model, seconds, growth, lambda: train(model, adamw(model))


def custom_init_weights():
    """A custom-code model (trust_remote_code's kind, 10.3M parameters)
    whose _init_weights writes in place through .data, DDP-synced."""
    from transformers import PretrainedConfig, PreTrainedModel
    from transformers.modeling_outputs import CausalLMOutput

    class TinyConfig(PretrainedConfig):
        model_type = "fsdpskip-tiny"

        def __init__(self, vocab_size=VOCAB, hidden_size=256, layers=4, initializer_range=0.02, **kwargs):
            super().__init__(**kwargs)
            self.vocab_size, self.hidden_size, self.layers = vocab_size, hidden_size, layers
            self.initializer_range = initializer_range

    class TinyModel(PreTrainedModel):
        config_class = TinyConfig

        def __init__(self, config):
            super().__init__(config)
            self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
            self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(config.hidden_size, 4 * config.hidden_size), nn.GELU(),
                                                      nn.Linear(4 * config.hidden_size, config.hidden_size))
                                        for _ in range(config.layers))
            self.norm = nn.LayerNorm(config.hidden_size)
            self.head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
            self.post_init()

        def _init_weights(self, module):
            if isinstance(module, (nn.Linear, nn.Embedding)):
                module.weight.data.normal_(mean=0.0, std=self.config.initializer_range)
            if isinstance(module, nn.Linear) and module.bias is not None:
                module.bias.data.zero_()
            if isinstance(module, nn.LayerNorm):
                module.weight.data.fill_(1.0)
                module.bias.data.zero_()

        def forward(self, input_ids, labels=None):
            hidden = self.embed(input_ids)
            for block in self.blocks:
                hidden = hidden + block(hidden)
            logits = self.head(self.norm(hidden))
            loss = nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1))
            return CausalLMOutput(loss=loss, logits=logits)

    model, seconds, growth = measured(lambda: TinyModel(TinyConfig()))
    synced = nn.parallel.DistributedDataParallel(model)
    return model, seconds, growth, lambda: train(synced, adamw(model))


def peft_before_sync():
    """PEFT LoRA adapters added to a model built from its config, before
    DDP's sync: the adapters are skipped on rank 1 and the sync fills them."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaForCausalLM

    def build():
        return get_peft_model(LlamaForCausalLM(llama_config()),
                              LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=["q_proj", "v_proj"]))
    model, seconds, growth = measured(build)
    synced = nn.parallel.DistributedDataParallel(model)
    return model, seconds, growth, lambda: train(synced, adamw(model))


# Digests a flow takes of what it made before training, compared with the
# run without fsdpskip like the losses (rank<N>.json's "made").
MADE = {}


def peft_after_sync():
    """PEFT LoRA adapters added after DDP's sync of the base model, with a
    reseed first (as a fine-tuning script that seeds before its adapters):
    they are made after the loading ended, so they are initialised on every
    rank as without fsdpskip, never skipped; then the adapted model is
    wrapped in DDP again and trained."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaForCausalLM
    base, seconds, growth = measured(lambda: LlamaForCausalLM(llama_config()))
    nn.parallel.DistributedDataParallel(base)
    torch.manual_seed(1)
    model = get_peft_model(base, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=["q_proj", "v_proj"]))
    # Each rank's own adapters, before DDP overwrites rank 1's with rank 0's.
    MADE["adapters"] = combined({name: digest for name, digest in parameter_digests(model).items() if "lora_" in name})
    synced = nn.parallel.DistributedDataParallel(model)
    return model, seconds, growth, lambda: train(synced, adamw(model))


def fabric_ddp():
    """Lightning Fabric's DDP strategy on CPU: the model built as usual (no
    empty_init), fabric.setup() wraps it in DDP, which broadcasts."""
    from lightning.fabric import Fabric
    from transformers import LlamaForCausalLM
    fabric = Fabric(accelerator="cpu", strategy="ddp", devices=int(os.environ["LOCAL_WORLD_SIZE"]))
    fabric.launch()  # under torchrun: makes the process group, starts nothing
    model, seconds, growth = measured(lambda: LlamaForCausalLM(llama_config()))
    synced, optimizer = fabric.setup(model, adamw(model))
    return model, seconds, growth, lambda: train(synced, optimizer, fabric.backward)


def from_pretrained(directory):
    """transformers' from_pretrained under accelerate's RAM-efficient FSDP
    loading (its variables in the launch environment), DDP-synced: what each
    transformers release does on a non-zero rank (placeholders, an init, or
    reading the checkpoint itself) decides what there is to save."""
    # The model's module imported before the build is measured (transformers
    # 5.24's costs 1.9 s and 167 MiB), as the config flows import it.
    from transformers import AutoModelForCausalLM, LlamaForCausalLM  # noqa: F401
    model, seconds, growth = measured(lambda: AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32))
    synced = nn.parallel.DistributedDataParallel(model)
    return model, seconds, growth, lambda: train(synced, adamw(model))


def save(directory):
    """The Llama checkpoint from_pretrained reads, written by the transformers
    that will read it."""
    from transformers import LlamaForCausalLM
    torch.manual_seed(1)  # rank 0's checkpoint: not what a seeded build makes
    LlamaForCausalLM(llama_config()).save_pretrained(directory)


FLOWS = {"ddp-from-config": ddp_from_config, "fsdp2-broadcast": fsdp2_broadcast,
         "custom-init-weights": custom_init_weights, "peft-before-sync": peft_before_sync,
         "peft-after-sync": peft_after_sync, "fabric-ddp": fabric_ddp,
         "from-pretrained": from_pretrained}
# How each is launched, with and without fsdpskip: flow_variables.py.


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("flow", choices=sorted(FLOWS) + ["save"])
    parser.add_argument("--out", help="where rank<N>.json goes")
    parser.add_argument("--directory", help="from-pretrained and save: the checkpoint")
    args = parser.parse_args()
    if args.flow in ("save", "from-pretrained") and not args.directory:
        parser.error("%s needs --directory" % args.flow)
    if args.flow != "save" and not args.out:
        parser.error("%s needs --out" % args.flow)
    if args.flow == "save":
        return save(args.directory)
    torch.set_num_threads(1)
    torch.manual_seed(0)  # as a training script seeds at its top, on every rank
    import transformers  # noqa: F401  imports done before anything is timed
    if args.flow != "fabric-ddp":  # Fabric makes the process group itself
        dist.init_process_group("gloo")
    flow = FLOWS[args.flow]
    model, seconds, growth, training = flow(args.directory) if args.flow == "from-pretrained" else flow()
    everyone = gathered(parameter_digests(model))
    result = {"flow": args.flow, "rank": dist.get_rank(), "build_seconds": seconds, "rss_growth_bytes": growth,
              "model_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
              "equal_to_rank0": all(d == everyone[0] for d in everyone)}
    result["made"] = MADE
    result["losses"] = training()
    result["final"] = combined(parameter_digests(model))
    result["versions"] = {name: sys.modules[name].__version__ for name in ("torch", "transformers", "peft", "lightning")
                          if name in sys.modules}
    with open(os.path.join(args.out, "rank%d.json" % dist.get_rank()), "w") as out:
        json.dump(result, out)
    launch.end_rank()


if __name__ == "__main__":
    main()
