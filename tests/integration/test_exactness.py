"""Exact by construction (issue 53): programs that take paths fsdpskip
does not list, two gloo ranks with FSDPSKIP=on, each compared bitwise with
its run without the preload: every rank ends with the values, generator and
next draw it has without fsdpskip, and runs to its end (exactness.py says
what each does). Rank 1 must have skipped something in each: otherwise the
comparison proves nothing."""
import os
import re

import pytest

from harness import HERE, rank_lines, summary_lines, torchrun

PROGRAM = os.path.join(HERE, "exactness.py")
VARIANTS = ["group_of_one", "ddp_of_one", "channels_last", "recv_then_steps", "local_checkpoint_then_double",
            "ema_before_sync", "all_gather_while_loading", "gather_while_loading", "all_reduce_sync",
            "source_written_by_others", "randperm_between", "numpy_and_buffers", "save_before_sync",
            "share_memory_before_sync", "trunc_normal_sent_and_read"]


def job(tmp_path, variant, **variables):
    out = tmp_path / ("out-%d" % len(list(tmp_path.iterdir())))
    out.mkdir()
    done, ranks = torchrun([PROGRAM, "--out", str(out), variant], str(out), nproc=2, **variables)
    assert len(ranks) == 2, done.stdout[-2000:] + done.stderr[-2000:]
    return done, ranks


@pytest.mark.every_torch
@pytest.mark.parametrize("variant", VARIANTS)
def test_a_program_ends_as_without_fsdpskip(tmp_path, variant):
    _, plain = job(tmp_path, variant, preload=False)
    done, ranks = job(tmp_path, variant, FSDPSKIP="on")
    assert ranks == plain, "\n".join(rank_lines(done, 1))[-3000:]
    summary = summary_lines("\n".join(rank_lines(done, 1)), 1)
    assert len(summary) == 1 and int(re.search(r"on (\d+) storages", summary[0]).group(1)) > 0, summary
    assert "pending 0" in summary[0], summary


@pytest.mark.every_torch
def test_a_receive_keeps_the_saving(tmp_path):
    """dist.recv into every skipped storage (gloo's recv row): another rank's
    data writes each whole, so each is resolved by that overwrite, never
    materialized; the values are checked above (recv_then_steps)."""
    done, _ = job(tmp_path, "recv_then_steps", FSDPSKIP="on")
    [summary] = summary_lines("\n".join(rank_lines(done, 1)), 1)
    skipped = int(re.search(r"on (\d+) storages", summary).group(1))
    assert skipped > 0 and "resolved by overwrite %d," % skipped in summary, summary
    assert "materialized" not in summary, summary
