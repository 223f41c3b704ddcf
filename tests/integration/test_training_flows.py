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

import pytest

from harness import SANITIZED, SOURCE_DIR, rank_lines, said_by_fsdpskip, summary_lines, torchrun
from flow_variables import job_variables  # tools/workloads, on the path harness set

FLOWS = os.path.join(SOURCE_DIR, "tools", "workloads", "flows.py")
NEEDS = {"ddp-from-config": ("transformers",), "fsdp2-broadcast": ("transformers",),
         "custom-init-weights": ("transformers",), "peft-before-sync": ("transformers", "peft"),
         "fabric-ddp": ("transformers", "lightning")}


def job(tmp_path, flow, preload):
    out = tmp_path / ("%s-%s" % (flow, "with" if preload else "without"))
    out.mkdir()
    done, ranks = torchrun([FLOWS, flow, "--out", str(out)], str(out), preload=preload, **job_variables(flow, preload))
    assert [r["rank"] for r in ranks] == [0, 1], done.stderr[-3000:]
    return done, ranks


@pytest.mark.parametrize("flow", sorted(NEEDS))
def test_training_is_bitwise_unchanged_and_rank1_builds_for_a_fraction(tmp_path, flow):
    if not os.environ.get("FSDPSKIP_FRAMEWORKS_PATH"):
        pytest.skip("the training flows run against tools/pip-venv's pinned frameworks")
    missing = [name for name in NEEDS[flow] if importlib.util.find_spec(name) is None]
    assert not missing, "not installed: %s" % " ".join(missing)
    _, plain = job(tmp_path, flow, preload=False)
    done, ranks = job(tmp_path, flow, preload=True)
    for rank in (0, 1):
        assert ranks[rank]["losses"] == plain[rank]["losses"], (rank, plain[rank], ranks[rank])
        assert ranks[rank]["final"] == plain[rank]["final"], (rank, plain[rank], ranks[rank])
        assert ranks[rank]["made"] == plain[rank]["made"], (rank, plain[rank], ranks[rank])
        assert ranks[rank]["equal_to_rank0"] and plain[rank]["equal_to_rank0"], rank
    model = ranks[1]["model_bytes"]
    assert plain[1]["rss_growth_bytes"] > 0.9 * model, plain[1]  # without fsdpskip, rank 1 commits the model
    if not SANITIZED:
        assert ranks[1]["rss_growth_bytes"] < 0.35 * model, ranks[1]
    said = said_by_fsdpskip(rank_lines(done, 1))
    summary = summary_lines("\n".join(said), 1)
    assert len(summary) == 1 and summary[0].endswith("pending 0"), said
    assert not any("error" in line or "warning" in line for line in said), said
    assert said_by_fsdpskip(rank_lines(done, 0)) == []
