"""The decision follows the environment as the program changes it:
frameworks set accelerate's FSDP variables from Python (os.environ calls
setenv and unsetenv), after the process started. Helper processes that
inherit an active environment stay quiet."""
import json

import pytest

from harness import PYTHON, SCENARIOS, fsdpskip_lines, run, scenario, summary_lines


def skipped(stderr):
    """Whether rank 1's summary says it skipped inits (a value read
    afterwards is materialized: the values alone cannot tell)."""
    summary = summary_lines(stderr, 1)
    return len(summary) == 1 and "skipped 0 calls" not in summary[0] and "skipped" in summary[0]


@pytest.mark.every_torch
@pytest.mark.second_build
def test_variables_set_from_python_before_loading_turn_auto_mode_on():
    plain, _ = scenario("environ_set_before_loading", preload=False, LOCAL_RANK=1)
    out, done = scenario("environ_set_before_loading", LOCAL_RANK=1)
    assert out == plain and skipped(done.stderr), done.stderr
    # Rank 0 under the same program stays bitwise as without the preload.
    rank0, done0 = scenario("environ_set_before_loading", LOCAL_RANK=0)
    assert rank0 == plain and done0.stderr == ""


def test_variables_set_then_removed_before_any_parameter_skip_nothing():
    plain, _ = scenario("environ_set_and_removed", preload=False, LOCAL_RANK=1)
    out, done = scenario("environ_set_and_removed", LOCAL_RANK=1)
    assert out == plain and done.stderr == ""
    _, debug = scenario("environ_set_and_removed", LOCAL_RANK=1, FSDPSKIP_LOG="debug")
    changes = [line.split("decision: ")[1].split()[0] for line in fsdpskip_lines(debug.stderr) if "after a change of" in line]
    assert changes == ["active", "inactive"], debug.stderr


def test_turning_off_part_way_initialises_later_models_and_keeps_earlier_skips_pending():
    plain, _ = scenario("environ_switched", preload=False, LOCAL_RANK=1)
    out, done = scenario("environ_switched", LOCAL_RANK=1, FSDPSKIP_LOG="debug")
    assert out == plain, "every value as without the preload, skipped while on or not while off"
    lines = fsdpskip_lines(done.stderr)
    changes = [line for line in lines if "after a change of" in line]
    assert len(changes) == 3 and all("FSDP_CPU_RAM_EFFICIENT_LOADING" in line for line in changes), lines
    assert [line.split("decision: ")[1].split()[0] for line in changes] == ["active", "inactive", "active"], changes
    assert all("a new loading phase begins" in line for line in changes[::2]), changes
    # Nothing was synced: the two skipped models (2 storages of a page or
    # more each) were materialized when they were read; the second was never skipped.
    summary = summary_lines("\n".join(lines), 1)
    assert len(summary) == 1 and "on 4 storages" in summary[0] and "materialized 4" in summary[0], lines
    assert summary[0].endswith("pending 0"), summary


def test_local_rank_set_from_python_counts_too():
    """torch elastic's function entrypoints set LOCAL_RANK after start-up."""
    done = run([PYTHON, "-c", "import os; os.environ['LOCAL_RANK'] = '1'; import runpy; "
                "runpy.run_path(%r, run_name='__main__')" % SCENARIOS, "hf_init_weights"], FSDPSKIP="on")
    assert done.returncode == 0, done.stderr
    plain, _ = scenario("hf_init_weights", preload=False)
    assert json.loads(done.stdout) == plain and skipped(done.stderr), done.stderr


def test_debug_names_the_decision_at_start_up():
    _, done = scenario("hf_init_weights", LOCAL_RANK=1, FSDPSKIP="on", FSDPSKIP_LOG="debug")
    assert "decision at start-up: active (mode on (FSDPSKIP=on), local rank 1 from LOCAL_RANK)" in done.stderr
    _, done = scenario("hf_init_weights", LOCAL_RANK=1, FSDPSKIP_LOG="debug")
    assert "decision at start-up: inactive (mode auto, ACCELERATE_USE_FSDP is unset)" in done.stderr


@pytest.mark.every_torch
@pytest.mark.second_build
def test_spawned_dataloader_workers_print_nothing():
    plain, _ = scenario("dataloader_workers", preload=False, LOCAL_RANK=1)
    out, done = scenario("dataloader_workers", LOCAL_RANK=1, FSDPSKIP="on")
    assert out == plain and out["sums"] == [6.0, 22.0, 38.0] and skipped(done.stderr), out
    lines = fsdpskip_lines(done.stderr)
    assert len(lines) == 2 and lines[0] in summary_lines(done.stderr, 1), done.stderr
    assert "no broadcast from rank 0 was seen" in lines[1]
    # A process that imports torch and skips nothing says nothing, unless asked.
    quiet = run([PYTHON, "-c", "import torch; torch.ones(3)"], LOCAL_RANK=1, FSDPSKIP="on")
    assert quiet.returncode == 0 and quiet.stderr == ""
    told = run([PYTHON, "-c", "import torch; torch.ones(3)"], LOCAL_RANK=1, FSDPSKIP="on", FSDPSKIP_LOG="debug")
    assert "local rank 1 pid" in told.stderr and "skipped 0 calls" in told.stderr, told.stderr
