"""Threads making, initialising, copying and freeing parameters at once,
with children forked in the middle (tests/integration/thread_stress.cc):
every init on an active rank is skipped and, read, holds its values; every
copy lands, and the one summary (the parent's) accounts for every call."""
import os
import re

import pytest

from harness import run, summary_lines

pytestmark = [pytest.mark.every_torch, pytest.mark.second_build]

PROGRAM = os.environ["FSDPSKIP_THREAD_STRESS"]
THREADS, ITERATIONS, FORKS = 8, 200, 6


def counts(stdout):
    """{"threads": {...}, "children": {...}} from the program's two lines."""
    return {who: {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", rest)}
            for who, rest in (line.split(":", 1) for line in stdout.splitlines())}


def stress(**variables):
    done = run([PROGRAM, str(THREADS), str(ITERATIONS), str(FORKS)], **variables)
    assert done.returncode == 0, done.stderr
    return counts(done.stdout), done


def test_without_the_preload_only_zero_reads_as_zero():
    found, _ = stress(preload=False)
    parameters = THREADS * ITERATIONS
    assert found["threads"] == {"parameters": parameters, "zero_after_init": parameters // 4, "copied": parameters}
    assert found["children"] == {"parameters": FORKS, "zero_after_init": FORKS // 2, "copied": FORKS}


def test_on_an_active_rank_every_init_is_skipped_reads_its_values_and_one_summary_counts_them():
    """Every init is skipped; reading it right after materializes it (in
    the threads, and in the forked children), so every count is the one
    without the preload."""
    found, done = stress(FSDPSKIP="on", LOCAL_RANK="1")
    plain, _ = stress(preload=False)
    assert found == plain
    parameters = THREADS * ITERATIONS
    summary = summary_lines(done.stderr)
    assert len(summary) == 1, done.stderr  # forked children report nothing
    assert "skipped %d calls" % parameters in summary[0] and "on %d storages" % parameters in summary[0]
    assert "materialized %d" % parameters in summary[0], summary[0]
    assert summary[0].endswith("by free 0, pending 0"), summary[0]
