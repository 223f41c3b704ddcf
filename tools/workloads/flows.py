"""One rank of a real framework's training flow, 2 ranks on CPU (gloo), as a
user runs it: every rank builds the model (initialising it), the framework
hands rank 0's values to the others, then a few optimizer steps. Writes
rank<N>.json: rank 1's build time and peak RSS growth, whether every rank
held its source's values after the sync (rank 0's, or its
data-parallel group's first rank's in a tensor-parallel flow), each step's loss (exact, as hex) and a
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
import tempfile

import torch
import torch.distributed as dist
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import launch  # noqa: E402
from load_model import data_parallel_group  # noqa: E402
from measure import digest, gathered, measured  # noqa: E402

STEPS = 4
BATCH, TOKENS, VOCAB = 2, 32, 16000
# The models' shape, from FSDPSKIP_FLOWS_MODEL: `small` for the test suite
# (an 11.4M-parameter Llama, 43.3 MiB fp32), `large` for the framework
# suite's published figures (tools/frameworks/run --model large: a
# 134M-parameter Llama, 0.50 GiB), where the few MiB of a build that are not
# parameters no longer decide a cell.
SHAPES = {"small": {"hidden": 256, "intermediate": 688, "layers": 4, "heads": 4},
          "large": {"hidden": 1024, "intermediate": 2752, "layers": 8, "heads": 8}}
SHAPE = SHAPES[os.environ.get("FSDPSKIP_FLOWS_MODEL", "small")]


def llama_config():
    """A Llama of SHAPE; dropout 0, as Llama's default."""
    from transformers import LlamaConfig
    return LlamaConfig(hidden_size=SHAPE["hidden"], intermediate_size=SHAPE["intermediate"],
                       num_hidden_layers=SHAPE["layers"], num_attention_heads=SHAPE["heads"],
                       num_key_value_heads=SHAPE["heads"], vocab_size=VOCAB, tie_word_embeddings=False)


def parameter_digests(model):
    return {name: digest(p) for name, p in model.named_parameters()}


def combined(digests):
    return hashlib.sha1(json.dumps(sorted(digests.items())).encode()).hexdigest()


def batches(vocab):
    return [torch.randint(0, vocab, (BATCH, TOKENS)) for _ in range(STEPS)]


def adamw(model):
    return torch.optim.AdamW(model.parameters(), lr=1e-3)


def train(model, optimizer, backward=lambda loss: loss.backward(), step=None):
    """STEPS optimizer steps on random tokens; each step's loss, exactly."""
    losses = []
    for input_ids in batches(VOCAB):
        optimizer.zero_grad(set_to_none=False)
        loss = model(input_ids=input_ids, labels=input_ids).loss
        backward(loss)
        (step or optimizer.step)()
        losses.append(float(loss.detach()).hex())
    return losses


def ddp_from_config():
    """Pretraining from scratch: Model(config) on every rank, DDP's
    constructor broadcasts rank 0's parameters."""
    from transformers import LlamaForCausalLM
    model, seconds, growth = measured(lambda: LlamaForCausalLM(llama_config()))
    synced = nn.parallel.DistributedDataParallel(model)
    return model, seconds, growth, lambda: train(synced, adamw(model))


def fsdp2_synced_from_rank0(model):
    """FSDP2 over every decoder layer and the model, then rank 0's full state
    dict broadcast into the shards (set_model_state_dict with
    broadcast_from_rank0), as accelerate's cpu_ram_efficient_loading does."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
    from torch.distributed.fsdp import fully_shard
    full = {name: t.clone() for name, t in model.state_dict().items()} if dist.get_rank() == 0 else {}
    for module in model.modules():
        if type(module).__name__ == "LlamaDecoderLayer":
            fully_shard(module)
    fully_shard(model)
    set_model_state_dict(model, full, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))


def fsdp2_broadcast():
    """FSDP2: Model(config) on every rank, fully_shard, then rank 0's full
    state dict broadcast into the shards (set_model_state_dict with
    broadcast_from_rank0; LLaMA-Factory's init_on_rank0)."""
    from transformers import LlamaForCausalLM
    model, seconds, growth = measured(lambda: LlamaForCausalLM(llama_config()))
    fsdp2_synced_from_rank0(model)
    return model, seconds, growth, lambda: train(model, adamw(model))


def custom_init_weights():
    """A custom-code model (trust_remote_code's kind, 10.3M parameters)
    whose _init_weights writes in place through .data, DDP-synced."""
    from transformers import PretrainedConfig, PreTrainedModel
    from transformers.modeling_outputs import CausalLMOutput

    class TinyConfig(PretrainedConfig):
        model_type = "fsdpskip-tiny"

        def __init__(self, vocab_size=VOCAB, hidden_size=SHAPE["hidden"], layers=SHAPE["layers"], initializer_range=0.02,
                     **kwargs):
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


def peft_left_out():
    """LoRA adapters added before a sync that covers only the base model:
    rank 0's base parameters broadcast one by one (as a loader of the base
    checkpoint's state dict does), then DDP told that the model is synced
    already (init_sync=False). No sync covers the adapters. Without fsdpskip
    every rank keeps its own seeded init; under it rank 1's skipped lora_A
    reads zeros, and fsdpskip must name those storages at training's first
    all-reduce, never stay silent: a flow listed for its warning, not for
    equal training."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaForCausalLM

    def build():
        return get_peft_model(LlamaForCausalLM(llama_config()),
                              LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=["q_proj", "v_proj"]))
    model, seconds, growth = measured(build)
    for name, param in model.named_parameters():
        if "lora_" not in name:
            dist.broadcast(param.data, src=0)
    synced = nn.parallel.DistributedDataParallel(model, init_sync=False)
    return model, seconds, growth, lambda: train(synced, adamw(model))


# Digests a flow takes of what it made before training, compared with the
# run without fsdpskip like the losses (rank<N>.json's "made").
MADE = {}
# The flow's tensor-parallel size T: each rank holds, after the sync, the
# values of its data-parallel group's first rank (rank mod T; rank 0 when T
# is 1).
TENSOR_PARALLEL = {"size": 1}
# The sync's own seconds and peak RSS growth, where a flow measures it apart:
# a source rank pays its deferred init there (tensor-parallel flows).
SYNC = {}


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


def deepspeed_engine():
    """DeepSpeed's engine on CPU (its CPU accelerator, gloo): Model(config)
    on every rank, deepspeed.initialize (ZeRO stage 0, fp32, torch's AdamW)
    broadcasts rank 0's parameters (_broadcast_model), then training through
    the engine's backward and step."""
    import deepspeed
    from transformers import LlamaForCausalLM
    model, seconds, growth = measured(lambda: LlamaForCausalLM(llama_config()))
    engine, optimizer, _, _ = deepspeed.initialize(model=model, optimizer=adamw(model), config={
        "train_micro_batch_size_per_gpu": BATCH, "zero_optimization": {"stage": 0}, "steps_per_print": 1 << 30})
    return model, seconds, growth, lambda: train(engine, optimizer, engine.backward, engine.step)


class TensorParallelGroups:
    """Megatron's mpu, as DeepSpeed takes it (deepspeed.initialize's `mpu`):
    2-way tensor parallelism inside each pair of consecutive ranks, so the
    data-parallel groups are {0, 2} and {1, 3}, and global rank 1 (local
    rank 1) is its group's source. Every rank makes every group, in the
    same order."""
    SIZE = 2

    def __init__(self):
        world, rank = dist.get_world_size(), dist.get_rank()
        for first in range(0, world, self.SIZE):
            ranks = list(range(first, first + self.SIZE))
            group = dist.new_group(ranks)
            if rank in ranks:
                self.model_group = group
        self.data_group, source = data_parallel_group(self.SIZE)
        self.data_ranks = list(range(source, world, self.SIZE))

    def get_model_parallel_group(self):
        return self.model_group

    def get_model_parallel_rank(self):
        return dist.get_rank(self.model_group)

    def get_model_parallel_world_size(self):
        return self.SIZE

    def get_data_parallel_group(self):
        return self.data_group

    def get_data_parallel_rank(self):
        return dist.get_rank(self.data_group)

    def get_data_parallel_world_size(self):
        return len(self.data_ranks)

    def get_data_parallel_group_ranks(self):
        return self.data_ranks


def deepspeed_tensor_parallel():
    """DeepSpeed's engine with 2-way tensor-parallel groups (4 ranks,
    TensorParallelGroups as its mpu): each rank builds its model-parallel
    part, seeded by its own rank so that no two ranks build alike (a
    Llama of SHAPE stands in for the part), and _broadcast_model sends
    each data-parallel group's first rank's parameters to the others: ranks
    0 and 1 are sources, 2 and 3 receive."""
    import deepspeed
    from transformers import LlamaForCausalLM
    groups = TensorParallelGroups()
    TENSOR_PARALLEL["size"] = groups.SIZE
    torch.manual_seed(dist.get_rank())
    model, seconds, growth = measured(lambda: LlamaForCausalLM(llama_config()))
    (engine, optimizer, _, _), SYNC["seconds"], SYNC["rss_growth_bytes"] = measured(
        lambda: deepspeed.initialize(model=model, optimizer=adamw(model), mpu=groups, config={
            "train_micro_batch_size_per_gpu": BATCH, "zero_optimization": {"stage": 0}, "steps_per_print": 1 << 30}))
    return model, seconds, growth, lambda: train(engine, optimizer, engine.backward, engine.step)


WORDS = ["w%d" % i for i in range(64)]  # the checkpoint flows' text: one token per word


def word_tokenizer(words):
    """A tokenizer made in memory (nothing downloaded): one id per word."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {word: i for i, word in enumerate(["<unk>", "<pad>", "<s>", "</s>"] + sorted(set(words)))}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", pad_token="<pad>", bos_token="<s>",
                                   eos_token="</s>")


def trl_dpo(directory):
    """TRL's DPOTrainer with a policy and an explicit reference model, both
    read by from_pretrained, on CPU (use_cpu: accelerate's MULTI_CPU, so the
    policy is DDP-synced when training starts; the reference model is only
    moved to the device, never synced). Without a GPU the trainer's
    Accelerator refuses accelerate's FSDP variables, so the job states
    FSDPSKIP=on instead (flow_variables.py). Each DPO step's loss exactly,
    through the trainer's own compute_loss."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, LlamaForCausalLM  # noqa: F401
    from trl import DPOConfig, DPOTrainer

    def build():
        return (AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32),
                AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32))
    (policy, reference), seconds, growth = measured(build)
    pairs = [{"prompt": " ".join(WORDS[i:i + 6]), "chosen": " ".join(WORDS[i + 6:i + 12]),
              "rejected": " ".join(WORDS[i + 12:i + 18])} for i in range(0, 8 * STEPS, 4)]
    losses = []

    class Recording(DPOTrainer):
        def compute_loss(self, *args, **kwargs):
            result = super().compute_loss(*args, **kwargs)
            losses.append(float((result[0] if isinstance(result, tuple) else result).detach()).hex())
            return result

    def training():
        with tempfile.TemporaryDirectory(prefix="fsdpskip-dpo-") as out:
            config = DPOConfig(output_dir=out, use_cpu=True, bf16=False, gradient_checkpointing=False,
                               report_to="none", save_strategy="no", dataloader_num_workers=0, max_steps=STEPS,
                               per_device_train_batch_size=BATCH, max_length=TOKENS, logging_steps=1,
                               optim="adamw_torch", learning_rate=1e-3, disable_tqdm=True)
            Recording(model=policy, ref_model=reference, args=config, train_dataset=Dataset.from_list(pairs),
                      processing_class=word_tokenizer(WORDS)).train()
        return losses
    return policy, seconds, growth, training


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


def reward_unsynced(directory):
    """A policy and a reward model over one checkpoint (a sequence classifier
    with one label: its score head is missing from the checkpoint), both
    loaded under accelerate's RAM-efficient loading variables before the
    policy's DDP sync; the reward model is used unsynced, as an
    evaluation-only model is, through training. Each rank's reward for a
    fixed input after training goes into "made". Where transformers gives a non-zero rank a real placeholder and
    initialises the missing head there, fsdpskip skips that init, and must
    name the head at training's first all-reduce; where it leaves the head
    on meta (5.23 on), neither fsdpskip nor anything else sees it."""
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, LlamaForCausalLM  # noqa: F401

    def build():
        return (AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32),
                AutoModelForSequenceClassification.from_pretrained(directory, num_labels=1, dtype=torch.float32))
    (policy, reward), seconds, growth = measured(build)
    synced = nn.parallel.DistributedDataParallel(policy)

    def training():
        losses = train(synced, adamw(policy))
        with torch.no_grad():  # the reward model kept, and used, through training
            value = reward(input_ids=torch.arange(TOKENS).unsqueeze(0)).logits
        MADE["reward"] = float(value.reshape(-1)[0]).hex()
        MADE["reward_equal_to_rank0"] = len(set(gathered(MADE["reward"]))) == 1
        return losses
    return policy, seconds, growth, training


def axolotl_config(directory, out, adapter):
    """What a user writes for axolotl's FSDP2 with RAM-efficient loading,
    over the checkpoint, tokenizer and jsonl dataset that `save` wrote; on a
    CPU, bf16 and fp16 off (axolotl's `auto` would pick fp16)."""
    from axolotl.utils.dict import DictDefault
    config = {"base_model": directory, "datasets": [{"path": os.path.join(directory, "data.jsonl"), "type": "completion"}],
              "output_dir": out, "sequence_len": TOKENS, "micro_batch_size": BATCH, "gradient_accumulation_steps": 1,
              "num_epochs": 1, "learning_rate": 1e-3, "optimizer": "adamw_torch", "bf16": False, "fp16": False,
              "tf32": False, "seed": 0, "fsdp_version": 2,
              "fsdp_config": {"cpu_ram_efficient_loading": True, "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
                              "transformer_layer_cls_to_wrap": "LlamaDecoderLayer",
                              "state_dict_type": "FULL_STATE_DICT", "reshard_after_forward": True}}
    if adapter:
        # Its fused LoRA kernels (on by default) are Triton kernels on "cuda": off on a CPU.
        config.update(adapter="lora", lora_r=8, lora_alpha=16, lora_dropout=0.0, lora_target_linear=True,
                      lora_mlp_kernel=False, lora_qkv_kernel=False, lora_o_kernel=False)
    return DictDefault(config)


def axolotl_load(directory, adapter):
    """axolotl 0.21's own loading, as `axolotl train` runs it: load_cfg
    (validation, setup_fsdp_envs setting accelerate's FSDP variables from
    Python, its FSDP patches), load_tokenizer, ModelLoader(...).load(). What a
    CPU forces: the process group exists before (axolotl's PartialState has
    no cpu=True), its NCCL peer-to-peer probe answers no (it asks CUDA, which
    raises without a driver), and no device mesh is built (axolotl builds it
    on "cuda")."""
    import axolotl.utils.trainer
    from axolotl.cli.config import load_cfg
    from axolotl.loaders import ModelLoader, load_tokenizer
    axolotl.utils.trainer.check_cuda_p2p_ib_support = lambda: False
    out = tempfile.mkdtemp(prefix="fsdpskip-axolotl-")
    cfg = load_cfg(axolotl_config(directory, out, adapter))
    tokenizer = load_tokenizer(cfg)
    ModelLoader.use_parallel_config = None
    model, seconds, growth = measured(lambda: ModelLoader(cfg, tokenizer).load()[0])
    fsdp2_synced_from_rank0(model)  # accelerate runs no FSDP on a CPU: its GPU path's sync
    return model, seconds, growth, lambda: train(model, adamw(model))


def axolotl_fsdp2(directory):
    """axolotl's full fine-tune loading under FSDP2 with cpu_ram_efficient_loading."""
    return axolotl_load(directory, adapter=False)


def axolotl_lora(directory):
    """The same with a LoRA adapter: axolotl then also keeps the base's
    parameters on meta on non-zero ranks (patch_move_missing_keys_meta_for_fsdp)."""
    return axolotl_load(directory, adapter=True)


def save(directory):
    """The Llama checkpoint from_pretrained reads, written by the transformers
    that will read it."""
    from transformers import LlamaForCausalLM
    torch.manual_seed(1)  # rank 0's checkpoint: not what a seeded build makes
    LlamaForCausalLM(llama_config()).save_pretrained(directory)
    # What axolotl's loader reads beside it: a tokenizer and a dataset.
    word_tokenizer(WORDS).save_pretrained(directory)
    with open(os.path.join(directory, "data.jsonl"), "w") as data:
        for i in range(0, 48, 4):
            data.write(json.dumps({"text": " ".join(WORDS[i:i + 12])}) + "\n")


FLOWS = {"ddp-from-config": ddp_from_config, "fsdp2-broadcast": fsdp2_broadcast,
         "custom-init-weights": custom_init_weights, "peft-before-sync": peft_before_sync,
         "peft-after-sync": peft_after_sync, "peft-left-out": peft_left_out, "fabric-ddp": fabric_ddp,
         "deepspeed-engine": deepspeed_engine, "deepspeed-tensor-parallel": deepspeed_tensor_parallel,
         "from-pretrained": from_pretrained, "reward-unsynced": reward_unsynced,
         "trl-dpo": trl_dpo, "axolotl-fsdp2": axolotl_fsdp2, "axolotl-lora": axolotl_lora}
# Flows that read a checkpoint (--directory), made by `save` with the
# transformers that reads it.
CHECKPOINT_FLOWS = ("from-pretrained", "reward-unsynced", "trl-dpo", "axolotl-fsdp2", "axolotl-lora")
# How each is launched, with and without fsdpskip: flow_variables.py.


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("flow", choices=sorted(FLOWS) + ["save"])
    parser.add_argument("--out", help="where rank<N>.json goes")
    parser.add_argument("--directory", help="save and the flows that read a checkpoint: its directory")
    args = parser.parse_args()
    if args.flow in ("save",) + CHECKPOINT_FLOWS and not args.directory:
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
    model, seconds, growth, training = flow(args.directory) if args.flow in CHECKPOINT_FLOWS else flow()
    everyone = gathered(parameter_digests(model))
    result = {"flow": args.flow, "rank": dist.get_rank(), "build_seconds": seconds, "rss_growth_bytes": growth,
              "model_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
              "equal_to_source": all(d == everyone[rank % TENSOR_PARALLEL["size"]] for rank, d in enumerate(everyone))}
    result["made"] = MADE
    result["sync"] = SYNC
    result["losses"] = training()
    result["final"] = combined(parameter_digests(model))
    result["versions"] = {name: sys.modules[name].__version__
                          for name in ("torch", "transformers", "peft", "lightning", "deepspeed", "trl", "axolotl")
                          if name in sys.modules}
    with open(os.path.join(args.out, "rank%d.json" % dist.get_rank()), "w") as out:
        json.dump(result, out)
    launch.end_rank()


if __name__ == "__main__":
    main()
