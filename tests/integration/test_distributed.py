"""2-rank torchrun jobs on loopback (gloo): rank 1 skips, rank 0's values
arrive by DDP's constructor or per-parameter dist.broadcast, and afterwards
every rank holds rank 0's values bitwise."""
import concurrent.futures
import inspect
import json
import os
import re
import subprocess

import pytest
import torch

from harness import (COMMAND, LOAD_MODEL, PYTHON, SANITIZED, SCENARIOS, rank_lines, require, run, said_by_fsdpskip,
                     summary_lines, torchrun)

pytestmark = [pytest.mark.every_torch, pytest.mark.sanitized]

measures_memory = pytest.mark.skipif(SANITIZED, reason="ASan's allocator commits memory of its own")


# Up to torch 2.11, trunc_normal_ is uniform_ then in-place erfinv_, mul_,
# add_, clamp_; torch 2.12 made it rejection sampling.
TRUNC_NORMAL_IS_A_CHAIN = "erfinv" in inspect.getsource(torch.nn.init._no_grad_trunc_normal_)


def job(tmp_path, *args, preload=True, agent=False, **variables):
    out = tmp_path / ("out-%d" % len(list(tmp_path.iterdir())))
    out.mkdir()
    done, ranks = torchrun([LOAD_MODEL, "--out", str(out)] + list(args), str(out), preload=preload, agent=agent,
                           **variables)
    assert len(ranks) == 2, done.stdout[-2000:]
    return done, ranks


def summary(done, rank=1):
    lines = summary_lines("\n".join(rank_lines(done, rank)), rank)
    assert len(lines) == 1, done.stderr[-3000:]
    return lines[0]


def counts(line):
    return {key: int(value) for key, value in re.findall(r"(overwrite|free|pending|materialized) (\d+)", line)}


def assert_synced(ranks):
    for result in ranks:
        assert result["equal_to_rank0"], "rank %d differs from rank 0 after the sync" % result["rank"]
        assert result["all_finite"]
        assert result["late_layer_equal"] and result["late_layer_nonzero"], "a layer made after the sync is initialised"


@pytest.mark.parametrize("style", ["hf4", "torch", "trunc"])
def test_rank1s_generator_ends_where_it_would_without_fsdpskip(tmp_path, style):
    """Every rank seeds alike and builds alike (transformers-4 _init_weights,
    torch's module defaults with kaiming_uniform_, trunc_normal_), then DDP
    syncs. Without reseeding, rank 1's global generator stands where rank 0's
    and the run without fsdpskip's do, a layer made after the sync is equal on
    every rank, and training with dropout 0.1 gives the same losses bitwise.
    trunc_normal_'s rejection sampling (torch 2.12 on) redraws as many values
    as its test rejects: that test reads the skipped values, so they are
    materialized first, and it redraws exactly as without fsdpskip."""
    args = ("--size", "tiny", "--style", style, "--verify", "--train", "3", "--dropout", "0.1")
    # From torch 2.12 trunc_normal_'s rejection test reads what it drew at
    # once: its draw runs (nothing may be skipped, so the summary is at debug
    # level). Up to 2.11 its steps join the recipe, and the sync overwrites
    # them as it does the others.
    rejection = style == "trunc" and not TRUNC_NORMAL_IS_A_CHAIN
    _, plain = job(tmp_path, *args, preload=False)
    done, ranks = job(tmp_path, *args, FSDPSKIP="on", FSDPSKIP_LOG="debug" if rejection else "summary")
    line = summary(done)
    if rejection:
        assert not re.search(r"normal_ \d+", line) and "materialized" not in line, line
    else:
        assert counts(line)["overwrite"] > 0, line
    assert counts(line)["pending"] == 0, line
    warned = [said for said in said_by_fsdpskip(rank_lines(done, 1)) if "may not be where it would be" in said]
    assert warned == [] and "rejection" not in line, done.stderr[-3000:]
    for result in plain + ranks:
        assert result["rng_after_sync"] == plain[0]["rng_after_sync"], "rank %d's generator" % result["rank"]
        assert result["unseeded_layer_equal"], result["rank"]
    assert [r["losses"] for r in ranks] == [r["losses"] for r in plain]


@pytest.mark.second_build('hf4-ddp')
@pytest.mark.emulated('hf4-ddp', 'torch-broadcast')
@pytest.mark.parametrize("style,sync", [("hf4", "ddp"), ("torch", "broadcast"), ("trunc", "ddp"), ("hf5", "ddp")])
def test_rank1_skips_then_holds_rank0_values(tmp_path, style, sync):
    """LD_PRELOAD=libfsdpskip.so torchrun …, as the README runs a job: the
    agent, a process with torch and the preload, prints nothing either."""
    # The tiny transformers-5 placeholders are under 1 MiB: zeroed by memset,
    # nothing skipped, so rank 1's summary is printed at debug level only.
    # From torch 2.12, trunc_normal_'s draws run (its rejection test reads them at once).
    log = "debug" if style == "hf5" or (style == "trunc" and not TRUNC_NORMAL_IS_A_CHAIN) else "summary"
    done, ranks = job(tmp_path, "--size", "tiny", "--style", style, "--sync", sync, "--verify", FSDPSKIP="on",
                      FSDPSKIP_LOG=log, agent=True)
    assert_synced(ranks)
    assert said_by_fsdpskip(rank_lines(done, 0)) == [], "rank 0 prints nothing"
    unprefixed = [l for l in (done.stdout + done.stderr).splitlines() if not l.startswith("[default")]
    assert said_by_fsdpskip(unprefixed) == [], "the launcher prints nothing"
    line = summary(done)
    assert counts(line)["pending"] == 0, line
    if style not in ("hf5", "trunc"):  # transformers-5 placeholders have no init to skip
        assert counts(line)["overwrite"] > 0, line
    if style == "trunc" and TRUNC_NORMAL_IS_A_CHAIN:  # uniform_, then its steps: all skipped, then overwritten
        assert all(re.search(r"%s \d+" % kernel, line) for kernel in ("uniform_", "erfinv_", "mul_", "add_", "clamp_"))
        assert counts(line)["overwrite"] > 0 and counts(line).get("materialized", 0) == 0, line
    elif style == "trunc":  # torch >= 2.12: rejection sampling reads its normal_ at once, which runs
        assert not re.search(r"normal_ \d+", line) and "materialized" not in line, line


def test_a_barrier_before_the_sync_does_not_end_the_loading(tmp_path):
    """A one-element all-reduce (NCCL's barrier, accelerate's
    wait_for_everyone) before DDP's sync is not training: the sync still
    resolves every skipped storage, and training afterwards is the same as
    without fsdpskip."""
    args = ("--size", "tiny", "--style", "hf4", "--sync", "ddp", "--barrier-before-sync", "--train", "3", "--verify")
    done, ranks = job(tmp_path, *args, FSDPSKIP="on")
    assert_synced(ranks)
    line = summary(done)
    assert counts(line)["pending"] == 0 and counts(line)["overwrite"] > 0, line
    assert not any("training began" in l for l in rank_lines(done, 1)), rank_lines(done, 1)
    _, plain = job(tmp_path, *args, preload=False)
    assert [r["losses"] for r in ranks] == [r["losses"] for r in plain]


def test_training_without_any_sync_trains_on_rank1s_own_init(tmp_path):
    """No sync at all: training's first forward reads every skipped
    parameter, which is materialized first (its init paid late), so rank 1
    trains exactly as without fsdpskip, never on zeros; and it is told that
    no broadcast came (nothing was saved)."""
    args = ("--size", "tiny", "--style", "hf4", "--sync", "none", "--train", "2", "--hold")
    done, ranks = job(tmp_path, *args, FSDPSKIP="on")
    line = summary(done)
    assert counts(line)["pending"] == 0 and counts(line)["materialized"] > 0, line
    assert any("no broadcast from rank 0 was seen" in l for l in rank_lines(done, 1)), rank_lines(done, 1)
    _, plain = job(tmp_path, *args, preload=False)
    assert [r["losses"] for r in ranks] == [r["losses"] for r in plain]


def test_a_model_no_sync_covers_is_named_when_training_begins(tmp_path):
    """A reference model built beside the policy and left out of DDP's sync:
    without fsdpskip it is the same on both ranks (seeded alike). With it,
    rank 1's stays pending until the first gradient all-reduce, which says so
    in one warning, names its storages (at most 20 lines) and materializes
    them, before training goes on (the default, FSDPSKIP_ON_PENDING=warn):
    rank 1's model is then its own init, as without fsdpskip."""
    args = ("--size", "tiny", "--style", "hf4", "--sync", "ddp", "--unsynced-model", "--train", "2")
    _, plain = job(tmp_path, *args, preload=False)
    assert all(r["unsynced_equal_to_rank0"] for r in plain)
    done, ranks = job(tmp_path, *args, FSDPSKIP="on")
    lines = said_by_fsdpskip(rank_lines(done, 1))
    began = [l for l in lines if "training began" in l]
    assert len(began) == 1 and "warning:" in began[0], lines
    assert "after rank 0's broadcast, which did not cover every skipped storage" in began[0], lines
    pending = int(re.search(r"(\d+) skipped storages were still pending", began[0]).group(1))
    named = [l for l in lines if "warning: pending storage" in l]
    assert pending > 0 and len(named) == min(pending, 20), lines
    assert lines.index(began[0]) < lines.index(named[0]) < lines.index(summary(done)), lines
    line = counts(summary(done))
    assert line["pending"] == 0 and line["free"] == 0 and line["materialized"] >= pending, line
    assert ranks[1]["unsynced_equal_to_rank0"] and len(ranks[1]["losses"]) == 2
    assert [r["losses"] for r in ranks] == [r["losses"] for r in plain]


def unsynced_scenario(**variables):
    variables = dict(dict(LOCAL_RANK=1, FSDPSKIP="on"), **variables)
    return run([PYTHON, SCENARIOS, "unsynced_model_then_training"], **variables)


def test_on_pending_abort_ends_the_process_at_trainings_first_collective(tmp_path):
    """FSDPSKIP_ON_PENDING=abort: at the first gradient all-reduce, one error
    line, the exit summary, a line per pending storage and the report; then
    exit status 3, before training's next line runs. Audit mode ran every
    init: it warns and goes on."""
    report = tmp_path / "report.json"
    done = unsynced_scenario(FSDPSKIP_ON_PENDING="abort", FSDPSKIP_REPORT=str(report))
    lines = said_by_fsdpskip(done.stderr.splitlines())
    assert done.returncode == 3 and done.stdout == "", done.stderr
    assert "error:" in lines[0] and "training began" in lines[0] and "exit status 3" in lines[0], lines
    pending = json.loads(report.read_text())["pending"]
    reference_storages = 2  # small_model's of a page or more: the Linear's and Embedding's weights
    assert len(pending) == reference_storages, pending
    assert len([l for l in lines if "error: pending storage" in l]) == reference_storages, lines
    assert len(summary_lines(done.stderr, 1)) == 1, lines

    warned = unsynced_scenario()
    assert warned.returncode == 0 and json.loads(warned.stdout) == {"trained": True, "reference_zero": False}
    assert "FSDPSKIP_ON_PENDING=abort stops the process here" in warned.stderr, warned.stderr

    audited = unsynced_scenario(FSDPSKIP="audit", FSDPSKIP_ON_PENDING="abort")
    assert audited.returncode == 0 and json.loads(audited.stdout) == {"trained": True, "reference_zero": False}
    said = said_by_fsdpskip(audited.stderr.splitlines())
    assert any("warning:" in l and "would stay pending (audit" in l for l in said), said


@pytest.mark.skipif(SANITIZED, reason="ASan's allocator writes the start of each allocation it hands out")
def test_a_placeholder_nothing_wrote_is_named_when_training_begins(tmp_path):
    """A torch.empty placeholder that nothing wrote by training's first
    collective is named there ("never written", its shape and the Python
    line that made it), counted in the summary and the report, and fails
    `fsdpskip report`'s verdict; placeholders that arrived with data
    (torch.load), are not the CPU allocator's (frombuffer) or were zeroed
    are not. fsdpskip changes no value here: the program runs on."""
    report = tmp_path / "report.json"
    done = run([PYTHON, SCENARIOS, "never_written_placeholders"], LOCAL_RANK=1, FSDPSKIP="on",
               FSDPSKIP_REPORT=str(report))
    assert done.returncode == 0 and json.loads(done.stdout)["trained"], done.stderr
    named = [l for l in said_by_fsdpskip(done.stderr.splitlines()) if "never-written storage" in l]
    assert len(named) == 1 and "32000x768 Float" in named[0], done.stderr
    assert re.search(r"made at scenarios\.py:\d+ in never_written_placeholders", named[0]), named
    line = summary_lines(done.stderr, 1)
    assert len(line) == 1 and "never written 1" in line[0], done.stderr
    written = json.loads(report.read_text())
    assert written["storages_never_written"] == 1 and written["never_written"][0]["shape"] == "32000x768"
    assert written["never_written"][0]["kernel"] == "none"
    verdict = run([COMMAND, "report", str(report)])
    assert verdict.returncode == 1 and "placeholder(s) never written" in verdict.stdout + verdict.stderr, verdict
    stopped = run([PYTHON, SCENARIOS, "never_written_placeholders"], LOCAL_RANK=1, FSDPSKIP="on",
                  FSDPSKIP_ON_PENDING="abort")
    assert stopped.returncode == 3 and stopped.stdout == "", stopped.stderr
    assert "1 never-written placeholders; FSDPSKIP_ON_PENDING=abort: ending the process" in stopped.stderr


TEARDOWN_RUNS = 40
RELEASE = tuple(int(v) for v in re.findall(r"\d+", torch.__version__)[:2])


def test_the_never_written_scenario_ends_every_time():
    """torch 2.6's gloo can deadlock in destroy_process_group when its worker
    drops the last reference to a tensor that has a Python object (it waits
    for the GIL the joining main thread holds: docs/limits.md); the scenarios
    hold their collectives' tensors until the group is destroyed. The
    scenario that, not holding them, hung in 58 of 1100 runs under the
    preload (tools/bench/teardown-race), run 40 times two at a time (as
    ctest -j2 loads the machine), each within 120 s: every run ends, and
    ends well. Each run is a process that imports torch, so
    the stress runs on the torch whose race it guards alone: the trixie
    root's suite, which requires it (tools/torch-roots)."""
    require("torch-2.6", RELEASE == (2, 6), "the race is torch 2.6's: its destroy_process_group was seen to hang, "
            "no other torch's (docs/limits.md)")
    def once(_):
        try:
            done = run([PYTHON, SCENARIOS, "never_written_placeholders"], LOCAL_RANK=1, FSDPSKIP="on", timeout=120)
        except subprocess.TimeoutExpired:
            return "hung"
        trained = done.returncode == 0 and json.loads(done.stdout).get("trained") is True
        return "ok" if trained else (done.returncode, done.stderr[-500:])
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        outcomes = list(pool.map(once, range(TEARDOWN_RUNS)))
    assert outcomes == ["ok"] * TEARDOWN_RUNS, outcomes


@measures_memory
def test_rank1_builds_without_committing_the_model(tmp_path):
    """0.1B parameters (423 MB fp32): rank 1's RSS growth while building is a
    small fraction of the model's bytes; rank 0 commits all of it."""
    done, ranks = job(tmp_path, "--size", "0.1b", "--style", "hf4", "--sync", "ddp", "--verify", FSDPSKIP="on")
    assert_synced(ranks)
    rank0, rank1 = ranks
    assert rank0["rss_growth_bytes"] > 0.9 * rank0["model_bytes"]
    assert rank1["rss_growth_bytes"] < 0.02 * rank1["model_bytes"], rank1["rss_growth_bytes"]


@pytest.mark.skipif(tuple(int(v) for v in torch.__version__.split(".")[:2]) < (2, 6), reason="FSDP2 from torch 2.6")
def test_fsdp2_shards_receive_rank0_values(tmp_path):
    """FSDP2 as accelerate loads it: fully_shard on rank 1's skipped
    placeholders copies nothing (the shards are skipped too), then rank 0's
    values are streamed into new shards and the old ones freed; gathered,
    every rank's shards are rank 0's values."""
    done, ranks = job(tmp_path, "--size", "tiny", "--style", "hf4", "--sync", "fsdp2", "--verify", FSDPSKIP="on")
    assert_synced(ranks)
    line = summary(done)
    assert re.search(r"copy_ \d+", line) and counts(line)["pending"] == 0 and counts(line)["free"] > 0, line


@measures_memory
def test_zeros_placeholders_cost_no_memory(tmp_path):
    """transformers 5 makes zeros placeholders on non-zero ranks."""
    done, ranks = job(tmp_path, "--size", "0.1b", "--style", "hf5", "--sync", "ddp", "--verify", FSDPSKIP="on")
    assert_synced(ranks)
    assert ranks[1]["rss_growth_bytes"] < 0.02 * ranks[1]["model_bytes"], ranks[1]["rss_growth_bytes"]
    assert "zeroed lazily" in summary(done)


def test_conversion_before_sync_stays_skipped(tmp_path):
    done, ranks = job(tmp_path, "--size", "tiny", "--style", "hf4", "--convert", "double", "--sync", "ddp", "--verify",
                      FSDPSKIP="on")
    assert_synced(ranks)
    line = summary(done)
    assert re.search(r"copy_ \d+", line), line
    assert counts(line)["pending"] == 0, line


@pytest.mark.emulated
def test_never_synced_model_is_reported_pending(tmp_path):
    report = tmp_path / "report-%l.json"
    done, ranks = job(tmp_path, "--size", "tiny", "--style", "hf4", "--sync", "none", "--hold", FSDPSKIP="on",
                      FSDPSKIP_REPORT=str(report))
    errors = [l for l in rank_lines(done, 1) if l.startswith("fsdpskip: error: pending storage")]
    assert errors and any("512x64 Float on cpu" in l for l in errors), done.stdout[-3000:]
    assert any("no broadcast from rank 0 was seen" in l for l in rank_lines(done, 1))
    with open(str(tmp_path / "report-1.json")) as f:
        data = json.load(f)
    assert data["schema_version"] == 3 and data["local_rank"] == 1
    assert data["pending_count"] == len(data["pending"]) > 0
    assert any(p["shape"] == "512x64" and p["dtype"] == "Float" and p["device"] == "cpu" and p["bytes"] == 131072
               for p in data["pending"])
    assert all(p["stack"] for p in data["pending"])
    assert not os.path.exists(str(tmp_path / "report-0.json")), "rank 0 is inactive and writes nothing"


def test_audit_changes_nothing_and_counts_what_it_would_skip(tmp_path):
    _, plain = job(tmp_path, "--size", "tiny", "--style", "torch", "--sync", "none", "--verify", preload=False)
    report = tmp_path / "audit-%r.json"
    done, audited = job(tmp_path, "--size", "tiny", "--style", "torch", "--sync", "none", "--verify",
                        FSDPSKIP="audit", FSDPSKIP_REPORT=str(report))
    assert audited[1]["digests"] == plain[1]["digests"], "audit must run every kernel"
    assert "audit: would skip" in summary(done)
    with open(str(tmp_path / "audit-1.json")) as f:
        data = json.load(f)
    assert data["mode"] == "audit" and data["storages_skipped"] > 0 and data["bytes_skipped"] > 0
    assert data["bytes_never_committed"] == 0
