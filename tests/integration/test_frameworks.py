"""Real frameworks (transformers, accelerate, FSDP2) on 2 ranks, CPU, gloo.
They exist in the torch-2 roots (tools/torch-roots); where a framework is
not installed these tests are skipped, and tools/test runs them in sid."""
import json
import os
import re

import pytest

from harness import (COMMAND, HERE, PYTHON, SCENARIOS, baseline, module_or_skip, rank_lines, run, said_by_fsdpskip,
                     summary_lines, torchrun)

pytestmark = [pytest.mark.every_torch, pytest.mark.second_build]

transformers = module_or_skip("transformers")
module_or_skip("accelerate")
WORKER = os.path.join(HERE, "frameworks_worker.py")
ACCELERATE_FSDP = {"ACCELERATE_USE_FSDP": "true", "FSDP_CPU_RAM_EFFICIENT_LOADING": "true"}


def saved(tmp_path_factory, kind):
    directory = tmp_path_factory.mktemp(kind)
    done = run([PYTHON, WORKER, "save", "--kind", kind, "--directory", str(directory)], preload=False)
    assert done.returncode == 0, done.stderr
    return directory


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return saved(tmp_path_factory, "llama")


@pytest.fixture(scope="module")
def mistral_checkpoint(tmp_path_factory):
    """A second architecture, with tied embeddings."""
    return saved(tmp_path_factory, "mistral")


def worker_job(tmp_path, command, *args, preload=True, **variables):
    out = tmp_path / ("%s-%s-%d" % (command, preload, len(list(tmp_path.iterdir()))))
    out.mkdir()
    return torchrun([WORKER, command, "--out", str(out)] + list(args), str(out), preload=preload, **variables)


def load_job(tmp_path, checkpoint, sync, preload, environ="launch", variables=ACCELERATE_FSDP):
    return worker_job(tmp_path, "load", "--directory", str(checkpoint), "--sync", sync, "--environ", environ,
                      preload=preload, **variables)


def assert_rank1_costs_no_more(plain, ranks, result=lambda r: r):
    """Where, without fsdpskip, rank 1 committed the model (transformers up to
    5.22's zeros_like placeholders, a model built from its config), it now
    commits at most rank 0's growth plus 2% of the model; where it did not
    (later releases leave non-zero ranks' parameters to the checkpoint: nothing
    to save), it commits at most its own growth without fsdpskip plus 2%.
    Rank 0's growth is no yardstick there: it may land on memory an earlier
    model freed and read negative. Every rank ends with rank 0's values.
    Returns whether rank 1 committed the model without fsdpskip."""
    rank0, rank1 = (result(r) for r in ranks)
    model = rank1["model_bytes"]
    placeholders = result(plain[1])["rss_growth_bytes"] > 0.5 * model
    yardstick = rank0 if placeholders else result(plain[1])
    assert rank1["rss_growth_bytes"] <= yardstick["rss_growth_bytes"] + 0.02 * model, (yardstick, rank1)
    for r in plain + ranks:
        assert result(r)["equal_to_rank0"] and result(r)["all_finite"], r
    return placeholders


def rank1_summary(done, zeroed_placeholders, tagged=True):
    """Rank 1's summary line ("" when it did nothing); nothing pending, no
    error; where transformers made placeholders, they were zeroed lazily;
    where it tagged parameters and neither skipped a call nor had
    placeholders to zero (it read the checkpoint), one line says there was
    nothing to save."""
    said = said_by_fsdpskip(rank_lines(done, 1))
    assert not any("error" in line for line in said), said
    summary = summary_lines("\n".join(said), 1)
    assert len(summary) <= 1 and all(line.endswith("pending 0") for line in summary), said
    if zeroed_placeholders:
        assert summary and "zeroed lazily" in summary[0], said
    nothing = [line for line in said if re.match(r"fsdpskip: local rank 1 pid \d+: nothing skipped: \d+ parameter", line)]
    skipped_none = not summary or re.search(r": skipped 0 calls ", summary[0])
    assert len(nothing) == (1 if tagged and skipped_none and not zeroed_placeholders else 0), said
    return summary[0] if summary else ""


@pytest.mark.parametrize("sync", ["ddp", "fsdp2"])
def test_from_pretrained_under_accelerates_ram_efficient_loading(tmp_path, checkpoint, sync):
    """Default auto mode, no FSDPSKIP set: transformers' zeros_like
    placeholders on rank 1 cost no memory, and the sync delivers rank 0's
    values."""
    _, plain = load_job(tmp_path, checkpoint, sync, preload=False)
    done, ranks = load_job(tmp_path, checkpoint, sync, preload=True)
    rank1_summary(done, assert_rank1_costs_no_more(plain, ranks))
    assert said_by_fsdpskip(rank_lines(done, 0)) == []


@pytest.mark.parametrize("environ", ["python", "training-args"])
def test_variables_set_from_python_turn_the_default_mode_on(tmp_path, checkpoint, environ):
    """The launch environment lacks accelerate's variables (python) or half of
    them (training-args: ACCELERATE_USE_FSDP only, as a launcher exports it);
    the script assigns them through os.environ before init_process_group, or
    transformers' TrainingArguments writes FSDP_CPU_RAM_EFFICIENT_LOADING from
    its fsdp_config before from_pretrained. Default mode."""
    launch = {} if environ == "python" else {"ACCELERATE_USE_FSDP": "true"}
    _, plain = load_job(tmp_path, checkpoint, "ddp", False, environ, launch)
    done, ranks = load_job(tmp_path, checkpoint, "ddp", True, environ, launch)
    assert ranks[1]["variables"]["FSDP_CPU_RAM_EFFICIENT_LOADING"].lower() == "true", ranks[1]["variables"]
    rank1_summary(done, assert_rank1_costs_no_more(plain, ranks))
    assert said_by_fsdpskip(rank_lines(done, 0)) == []


def test_enable_then_disable_ram_efficient_loading(tmp_path, checkpoint):
    """accelerate's enable_fsdp_ram_efficient_loading(), a load, then
    disable_fsdp_ram_efficient_loading() and a second model: the second is
    initialised as without the preload (bitwise), the first still resolves
    when DDP delivers rank 0's values."""
    _, plain = worker_job(tmp_path, "switch", "--directory", str(checkpoint), preload=False)
    done, ranks = worker_job(tmp_path, "switch", "--directory", str(checkpoint))
    placeholders = assert_rank1_costs_no_more(plain, ranks, lambda r: r["first"])
    for rank in (0, 1):
        assert ranks[rank]["second_digests"] == plain[rank]["second_digests"], rank
    rank1_summary(done, placeholders)


def test_every_model_of_a_multi_model_job_benefits(tmp_path, checkpoint, mistral_checkpoint):
    """Under the launch environment's variables, each model synced by DDP
    before the next: two from_pretrained models (Llama, then Mistral with tied
    embeddings: no statement), a third built from its config after accelerate's
    enable_fsdp_ram_efficient_loading(); then a seeded layer made after the
    syncs. No model costs rank 1 more than assert_rank1_costs_no_more allows, everything
    equals rank 0, and the late layer is initialised."""
    args = ("--directory", str(checkpoint), "--second", str(mistral_checkpoint))
    _, plain = worker_job(tmp_path, "models", *args, preload=False, **ACCELERATE_FSDP)
    done, ranks = worker_job(tmp_path, "models", *args, **ACCELERATE_FSDP)
    placeholders = [assert_rank1_costs_no_more(plain, ranks, lambda r: r[name])
                    for name in ("llama", "mistral", "llama_from_config")]
    assert placeholders[2], "without fsdpskip, a model built from its config is initialised on rank 1"
    for r in plain + ranks:
        assert r["late_layer_equal"] and r["late_layer_nonzero"], r
    line = rank1_summary(done, placeholders[0])
    assert re.search(r"normal_ \d+", line), line


# transformers from 5.23 makes no placeholders on a non-zero rank: every rank
# reads the checkpoint into its parameters, so a later model has no zero_ to
# make lazy, in memory or not (the sid root's 5.12 runs this).
READS_THE_CHECKPOINT_ON_EVERY_RANK = tuple(int(v) for v in re.findall(r"\d+", transformers.__version__)[:2]) >= (5, 23)


@pytest.mark.skipif(READS_THE_CHECKPOINT_ON_EVERY_RANK, reason="no placeholders on a non-zero rank to land anywhere")
def test_a_later_model_on_memory_an_earlier_one_freed_commits_no_more_than_alone(tmp_path, checkpoint,
                                                                                   mistral_checkpoint):
    """A job that loads a model, syncs it, drops it and loads the next: the
    next model's zeros_like placeholders land on the freed memory, which is
    still in memory. They hold no more of rank 1's RAM right after loading
    than the same model's alone, plus 2% of its bytes."""
    args = ("--directory", str(checkpoint), "--second", str(mistral_checkpoint))
    _, ranks = worker_job(tmp_path, "models", "--drop", "--only", "llama", "mistral", *args, **ACCELERATE_FSDP)
    _, alone = worker_job(tmp_path, "models", "--only", "mistral", *args, **ACCELERATE_FSDP)
    later, first = ranks[1]["mistral"]["resident_after_loading"], alone[1]["mistral"]["resident_after_loading"]
    assert later <= first + 0.02, (later, first)


def test_fsdpskip_run_inside_accelerate_launch():
    """`accelerate launch --no_python fsdpskip run -- python …`: the preload and
    accelerate's variables reach the program; auto mode acts on them. One
    process (accelerate's simple launcher): its multi-process launchers start
    torchrun's agent, which cannot start on Debian's libuv-less torch."""
    plain = baseline([PYTHON, SCENARIOS, "hf_init_weights"])
    skipping = run([PYTHON, SCENARIOS, "hf_init_weights"], FSDPSKIP="on", FSDPSKIP_LOCAL_RANK="1")
    # What it reads it materializes first: the values without fsdpskip.
    assert skipping.stdout == plain.stdout and "skipped" in skipping.stderr, skipping.stderr
    done = run(["accelerate", "launch", "--cpu", "--num_processes", "1", "--no_python",
                COMMAND, "run", "--", PYTHON, SCENARIOS, "hf_init_weights"],
               preload=False, HOME=os.environ.get("TMPDIR", "/tmp"), FSDPSKIP_LOCAL_RANK="1", **ACCELERATE_FSDP)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = summary_lines(done.stderr, 1)
    assert len(summary) == 1 and "skipped" in summary[0] and "(none)" not in summary[0], done.stderr[-2000:]
    assert skipping.stdout in done.stdout, "the program read rank 1's values"



def test_fsdpskip_run_inside_a_two_process_accelerate_launch(tmp_path):
    """`accelerate launch --use_fsdp --num_processes 2 --no_python fsdpskip run
    -- python …`: accelerate starts torchrun's agent and exports its FSDP
    variables; fsdpskip, in its default mode, acts on local rank 1 alone."""
    import launch
    if not launch.torchrun_agent_can_start(dict(os.environ)):
        pytest.skip("torchrun's agent cannot start with this torch (no libuv)")
    plain = json.loads(baseline([PYTHON, SCENARIOS, "hf_init_weights"]).stdout)
    report = str(tmp_path / "report-%l.json")
    done = run(["accelerate", "launch", "--use_fsdp", "--num_processes", "2", "--num_machines", "1",
                "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(launch.free_port()),
                "--no_python", COMMAND, "run", "--report", report, "--", PYTHON, SCENARIOS, "hf_init_weights"],
               preload=False, HOME=str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    # Both ranks print to one pipe: their objects may share a line.
    decoder, text, outputs = json.JSONDecoder(), done.stdout, []
    while "{" in text:
        found, end = decoder.raw_decode(text, text.index("{"))
        outputs.append(found)
        text = text[end:]
    # Rank 1 skipped, and read its values, materialized: the same as rank 0's.
    assert outputs == [plain, plain], outputs
    assert len(summary_lines(done.stderr)) == len(summary_lines(done.stderr, 1)) == 1, done.stderr[-3000:]
    assert not os.path.exists(report.replace("%l", "0")) and os.path.exists(report.replace("%l", "1"))


def test_fsdp2_torchtitan_flow(tmp_path):
    """meta → fully_shard → to_empty → init_weights → rank 0's checkpoint
    broadcast into the shards. FSDP2 shards before init, so each rank
    initialises only its shard, and the shards are DTensor locals that no
    ATen-level signal marks as parameters: fsdpskip leaves them initialised
    (README, Known limits). What must hold: every shard holds rank 0's values
    afterwards, nothing is pending, nothing is reported as an error."""
    _, plain = worker_job(tmp_path, "titan", preload=False)
    # debug: a process that skipped nothing prints its summary only then.
    done, ranks = worker_job(tmp_path, "titan", FSDPSKIP="on", FSDPSKIP_LOG="debug")
    for result in plain + ranks:
        assert result["equal_to_rank0"] and result["all_finite"], result
    # The shards are never tagged: no "nothing skipped" line either.
    assert rank1_summary(done, False, tagged=False), "at debug level rank 1 prints its summary"
    assert said_by_fsdpskip(rank_lines(done, 0)) == []


def test_accelerate_refuses_fsdp_on_a_cpu_only_machine():
    """Why the next test calls accelerate's FSDP2 loader itself rather than
    through Accelerator.prepare: with FSDP asked for, Accelerator wants a GPU."""
    done = run([PYTHON, "-c", "from accelerate import Accelerator; Accelerator(cpu=True)"], preload=False,
               **ACCELERATE_FSDP)
    assert done.returncode != 0 and "no available devices found" in done.stderr, done.stderr[-2000:]


def test_accelerates_fsdp2_loader(tmp_path, checkpoint):
    """from_pretrained under accelerate's variables, then accelerate's own
    fsdp2_load_full_state_dict (the model on meta, fully_shard, rank 0's
    tensors broadcast): rank 1's placeholders were skipped and are freed by
    the move to meta; every shard holds rank 0's values; nothing pending."""
    _, plain = worker_job(tmp_path, "accelerate", "--directory", str(checkpoint), preload=False, **ACCELERATE_FSDP)
    done, ranks = worker_job(tmp_path, "accelerate", "--directory", str(checkpoint), **ACCELERATE_FSDP)
    for result in plain + ranks:
        assert result["equal_to_rank0"] and result["all_finite"], result
    rank1_summary(done, plain[1]["placeholders_committed"])
