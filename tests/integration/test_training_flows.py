"""Real frameworks' training flows through to the optimizer (the CI subset of
tools/frameworks/run): each runs on 2 ranks without fsdpskip and then under
`FSDPSKIP=on`, as `fsdpskip run --mode on` starts it, and must train
bitwise the same: every step's loss and the final parameters on both ranks.
Rank 1 must build for a fraction of the memory it commits without fsdpskip,
and every skipped storage must resolve. The flows and their frameworks are
tools/workloads/flows.py's, pinned in tools/pip/frameworks.txt: they run
where tools/pip-venv installed those (FSDPSKIP_FRAMEWORKS_PATH, the pip
venv's suite), and there a missing one fails; elsewhere they are skipped
(tools/frameworks/run runs them against any torch)."""
import importlib.util
import os
import re

import pytest

from harness import (PYTHON, SANITIZED, SOURCE_DIR, rank_lines, require, run, said_by_fsdpskip, summary_lines,
                     torchrun)
from flow_variables import job_variables  # tools/workloads, on the path harness set

pytestmark = [pytest.mark.every_torch]

FLOWS = os.path.join(SOURCE_DIR, "tools", "workloads", "flows.py")
NEEDS = {"ddp-from-config": ("transformers",), "fsdp2-broadcast": ("transformers",),
         "custom-init-weights": ("transformers",), "peft-before-sync": ("transformers", "peft"),
         "fabric-ddp": ("transformers", "lightning")}


def job(tmp_path, flow, preload, nproc=2):
    out = tmp_path / ("%s-%s" % (flow, "with" if preload else "without"))
    out.mkdir()
    done, ranks = torchrun([FLOWS, flow, "--out", str(out)], str(out), nproc=nproc, preload=preload,
                           **job_variables(flow, preload))
    assert [r["rank"] for r in ranks] == list(range(nproc)), done.stderr[-3000:]
    return done, ranks


@pytest.mark.parametrize("flow", sorted(NEEDS))
def test_training_is_bitwise_unchanged_and_rank1_builds_for_a_fraction(tmp_path, flow):
    frameworks_installed(*NEEDS[flow])
    _, plain = job(tmp_path, flow, preload=False)
    done, ranks = job(tmp_path, flow, preload=True)
    for rank in (0, 1):
        assert ranks[rank]["losses"] == plain[rank]["losses"], (rank, plain[rank], ranks[rank])
        assert ranks[rank]["final"] == plain[rank]["final"], (rank, plain[rank], ranks[rank])
        assert ranks[rank]["made"] == plain[rank]["made"], (rank, plain[rank], ranks[rank])
        assert ranks[rank]["equal_to_source"] and plain[rank]["equal_to_source"], rank
    model = ranks[1]["model_bytes"]
    assert plain[1]["rss_growth_bytes"] > 0.9 * model, plain[1]  # without fsdpskip, rank 1 commits the model
    if not SANITIZED:
        assert ranks[1]["rss_growth_bytes"] < 0.35 * model, ranks[1]
    said = said_by_fsdpskip(rank_lines(done, 1))
    summary = summary_lines("\n".join(said), 1)
    assert len(summary) == 1 and summary[0].endswith("pending 0"), said
    assert not any("error" in line or "warning" in line for line in said), said
    assert said_by_fsdpskip(rank_lines(done, 0)) == []


def test_a_tensor_parallel_source_replays_its_init_as_deepspeed_sends_it(tmp_path):
    """DeepSpeed's engine on 4 ranks with 2-way tensor-parallel groups (its
    mpu): data-parallel groups {0, 2} and {1, 3}, each rank seeded apart,
    so rank 1 (local rank 1) is a source. Under fsdpskip rank 1 skips, then
    replays every skipped storage as _broadcast_model sends it; ranks 2
    and 3 skip and receive; every rank trains bitwise as without it."""
    frameworks_installed("transformers", "deepspeed")
    _, plain = job(tmp_path, "deepspeed-tensor-parallel", preload=False, nproc=4)
    done, ranks = job(tmp_path, "deepspeed-tensor-parallel", preload=True, nproc=4)
    for rank in range(4):
        assert ranks[rank]["losses"] == plain[rank]["losses"], (rank, plain[rank], ranks[rank])
        assert ranks[rank]["final"] == plain[rank]["final"], (rank, plain[rank], ranks[rank])
        assert ranks[rank]["equal_to_source"] and plain[rank]["equal_to_source"], rank
    assert said_by_fsdpskip(rank_lines(done, 0)) == []
    summaries = {rank: summary_lines("\n".join(said_by_fsdpskip(rank_lines(done, rank))), rank) for rank in (1, 2, 3)}
    assert all(len(lines) == 1 and lines[0].endswith("pending 0") for lines in summaries.values()), summaries
    storages = re.search(r" on (\d+) storages ", summaries[1][0]).group(1)
    assert "materialized %s;" % storages in summaries[1][0], summaries[1]
    for rank in (2, 3):
        assert "materialized" not in summaries[rank][0] and "resolved by overwrite %s," % storages in summaries[rank][0], \
            summaries[rank]


def frameworks_installed(*names):
    require("frameworks", bool(os.environ.get("FSDPSKIP_FRAMEWORKS_PATH")),
            "the training flows run against tools/pip-venv's pinned frameworks")
    missing = [name for name in names if importlib.util.find_spec(name) is None]
    assert not missing, "not installed: %s" % " ".join(missing)


def test_adapters_a_sync_leaves_out_hold_rank1s_own_init(tmp_path):
    """LoRA adapters added before a sync that covers the base model only (its
    parameters broadcast one by one, then DDP with init_sync=False): without
    fsdpskip rank 1 keeps its own seeded adapters, equal to rank 0's. Under
    it, rank 1's skipped adapters are materialized when training first reads
    them: the same, and nothing left pending."""
    frameworks_installed("transformers", "peft")
    done_plain, plain = job(tmp_path, "peft-left-out", preload=False)
    done, ranks = job(tmp_path, "peft-left-out", preload=True)
    assert plain[1]["equal_to_source"] and ranks[1]["equal_to_source"], (plain[1], ranks[1])
    assert said_by_fsdpskip(rank_lines(done_plain, 1)) == []
    summary = summary_lines("\n".join(said_by_fsdpskip(rank_lines(done, 1))), 1)
    assert len(summary) == 1 and "materialized" in summary[0] and summary[0].endswith("pending 0"), summary


def test_an_unsynced_reward_model_is_named_when_training_begins(tmp_path):
    """transformers 5.3 (every rank initialises what it loads) under
    accelerate's variables: a policy and a reward model whose head is not in
    the checkpoint, only the policy synced by DDP, the reward model used
    through training. The policy trains bitwise as without fsdpskip; the
    reward model's skipped inits, its head among them, are named at the
    first all-reduce, since no sync ever covers them."""
    frameworks_installed("transformers")
    from releases import transformers_path  # tools/workloads
    paths = ":".join([transformers_path("5.3.0"), os.environ["FSDPSKIP_FRAMEWORKS_PATH"]])
    checkpoint = tmp_path / "checkpoint"
    saved = run([PYTHON, FLOWS, "save", "--directory", str(checkpoint)], preload=False, PYTHONPATH=paths)
    assert saved.returncode == 0, saved.stderr[-2000:]

    def reward_job(preload):
        out = tmp_path / ("reward-%s" % preload)
        out.mkdir()
        return torchrun([FLOWS, "reward-unsynced", "--directory", str(checkpoint), "--out", str(out)], str(out),
                        preload=preload, PYTHONPATH=paths, **job_variables("reward-unsynced", preload))
    done_plain, plain = reward_job(False)
    done, ranks = reward_job(True)
    assert ranks[1]["versions"]["transformers"] == "5.3.0"
    for rank in (0, 1):
        assert ranks[rank]["losses"] == plain[rank]["losses"] and ranks[rank]["final"] == plain[rank]["final"], rank
    assert said_by_fsdpskip(rank_lines(done_plain, 1)) == []
    # The reward model, read by training before any collective, was
    # materialized there: rank 1 trains on its own init, as without fsdpskip.
    summary = summary_lines("\n".join(said_by_fsdpskip(rank_lines(done, 1))), 1)
    assert len(summary) == 1 and "materialized" in summary[0] and summary[0].endswith("pending 0"), summary
