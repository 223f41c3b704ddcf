"""Real python3-torch programs under the preload, one process each."""
import functools
import json
import os
import tempfile

import pytest

from harness import fsdpskip_lines, scenario, summary_lines

pytestmark = [pytest.mark.sanitized]


@functools.lru_cache(maxsize=None)
def three_ways(name):
    """(without preload, local rank 0, local rank 1), FSDPSKIP=on; once per
    scenario, for every test that reads it."""
    plain, _ = scenario(name, preload=False)
    rank0, done0 = scenario(name, preload=True, LOCAL_RANK=0, FSDPSKIP="on")
    assert fsdpskip_lines(done0.stderr) == [], "rank 0 must print nothing"
    with tempfile.TemporaryDirectory() as directory:
        report = os.path.join(directory, "report.json")
        rank1, done1 = scenario(name, preload=True, LOCAL_RANK=1, FSDPSKIP="on", FSDPSKIP_REPORT=report)
        # Rank 1's report at exit: the preload acted there, without which a
        # comparison alone would pass.
        assert os.path.exists(report), done1.stderr
        with open(report) as written:
            assert json.load(written)["local_rank"] == 1
    return plain, rank0, rank1, done1


def materialized(summary):
    """The storages rank 1's summary says it gave their values before
    something read or wrote them ("materialized N")."""
    import re
    found = re.search(r"materialized (\d+)", summary)
    return int(found.group(1)) if found else 0


@pytest.mark.every_torch
@pytest.mark.emulated('nn_init')  # the runs test_every_nn_init_function_is_skipped reads
@pytest.mark.parametrize("name", ["meta_to_empty_reset", "hf_init_weights", "nn_init", "views"])
def test_rank1_skips_inits_and_every_value_it_reads_is_the_one_without_it(name):
    """Rank 1 skips its parameters' inits; reading them (no broadcast ever
    comes here) materializes each first: every value equals the run without
    the preload, bitwise. Rank 0 is untouched."""
    plain, rank0, rank1, done1 = three_ways(name)
    assert rank0 == plain, "rank 0 must be bitwise identical to running without the preload"
    assert rank1 == plain, (plain, rank1)
    summary = summary_lines(done1.stderr, 1)
    assert len(summary) == 1 and "skipped" in summary[0] and materialized(summary[0]) > 0, done1.stderr
    assert "pending 0" in summary[0], summary


@pytest.mark.every_torch
@pytest.mark.emulated
def test_every_nn_init_function_is_skipped():
    plain, _, rank1, done1 = three_ways("nn_init")
    assert sorted(rank1) == sorted(
        ["kaiming_uniform_", "kaiming_normal_", "xavier_uniform_", "xavier_normal_", "constant_", "ones_", "zeros_",
         "normal_", "uniform_", "trunc_normal_"])
    assert rank1 == plain
    summary = summary_lines(done1.stderr, 1)[0]
    assert all(kernel + " " in summary for kernel in ("normal_", "uniform_", "fill_", "zero_")), summary


@pytest.mark.every_torch
@pytest.mark.emulated
def test_a_skipping_ranks_generators_end_where_they_would_without_it():
    """A skipped init advances the generator it would have drawn from by the
    draws it would have made: after every init style, dtype and a passed
    generator, rank 1's generators and their next draws are bitwise those of
    the run without the preload (and rank 1 did skip)."""
    plain, rank0, rank1, done1 = three_ways("generators_after_inits")
    assert rank0 == plain and rank1 == plain, (plain, rank1)
    summary = summary_lines(done1.stderr, 1)
    assert len(summary) == 1 and "normal_" in summary[0] and "uniform_" in summary[0], done1.stderr


@pytest.mark.every_torch
def test_noise_buffers_and_activations_are_bitwise_unchanged():
    plain, rank0, rank1, _ = three_ways("not_parameters")
    assert rank0 == plain
    assert rank1 == plain


@pytest.mark.every_torch
@pytest.mark.second_build
@pytest.mark.emulated
def test_every_row_reaches_its_real_original_unchanged():
    """Every interposed kernel, through torch's API, inactive and active (no
    parameter among them): the values torch computes without the preload."""
    plain, rank0, rank1, _ = three_ways("every_row")
    inactive, done = scenario("every_row", preload=True)
    assert fsdpskip_lines(done.stderr) == []
    assert inactive == plain and rank0 == plain and rank1 == plain


@pytest.mark.every_torch
def test_comparisons_of_a_skipped_parameter_see_its_values():
    """trunc_normal_'s rejection test on rank 1 (torch >= 2.12's, written
    out): the comparison reads the skipped parameter, which is materialized
    first, so every result equals the one without the preload."""
    plain, rank0, rank1, done1 = three_ways("rejection_sampling")
    assert rank0 == plain
    assert rank1 == plain, (plain, rank1)
    summary = summary_lines(done1.stderr, 1)
    assert len(summary) == 1 and "normal_ 1" in summary[0] and materialized(summary[0]) == 1, summary


@pytest.mark.every_torch
@pytest.mark.second_build
def test_torch_errors_pass_through_unchanged_skipped_or_not():
    plain, rank0, rank1, _ = three_ways("errors")
    assert rank0 == plain
    assert rank1 == plain
    assert plain["parameter.normal_negative_std"].startswith("RuntimeError: normal expects std >= 0.0")
    expected_to_pass = ("parameter.skipped_first", "parameter.erfinv_half")
    assert all(value != "no error" for key, value in plain.items()
               if key.startswith("parameter.") and key not in expected_to_pass), plain


@pytest.mark.every_torch
def test_thread_pool_initialisation_is_skipped_consistently():
    plain, _, rank1, done1 = three_ways("threads")
    assert rank1 == plain
    assert "normal_ 200" in summary_lines(done1.stderr, 1)[0], done1.stderr


@pytest.mark.every_torch
def test_forked_child_inherits_tags_and_reports_nothing():
    plain, _, rank1, done1 = three_ways("fork")
    assert rank1 == plain == {"param_zero": False, "fresh_nonzero": True, "child_status": 0}
    assert len(summary_lines(done1.stderr)) == 1, "only the parent reports: " + done1.stderr


@pytest.mark.every_torch
def test_freed_parameter_address_is_never_skipped_again():
    _, _, rank1, _ = three_ways("reuse")
    assert rank1["repeated"], "the address never repeated; the test proves nothing"
    assert rank1["nonzero_after_normal"]


def test_off_and_processes_without_rank_are_bitwise_identical():
    plain, _ = scenario("hf_init_weights", preload=False)
    for variables, why in (({"FSDPSKIP": "off", "LOCAL_RANK": 1}, "(FSDPSKIP=off)"),
                           ({"FSDPSKIP": "on"}, "no local rank variable is set"),
                           ({}, "ACCELERATE_USE_FSDP is unset")):
        out, done = scenario("hf_init_weights", preload=True, **variables)
        assert out == plain, variables
        assert done.stderr == "", variables
        _, debug = scenario("hf_init_weights", preload=True, FSDPSKIP_LOG="debug", **variables)
        decision = [line for line in fsdpskip_lines(debug.stderr) if "decision at start-up: inactive" in line]
        assert len(decision) == 1 and why in decision[0], debug.stderr


def test_auto_mode_follows_accelerates_variables():
    out, done = scenario("hf_init_weights", preload=True, LOCAL_RANK=1, ACCELERATE_USE_FSDP="true",
                         FSDP_CPU_RAM_EFFICIENT_LOADING="1")
    assert "skipped" in summary_lines(done.stderr, 1)[0], done.stderr
    plain, _ = scenario("hf_init_weights", preload=False)
    assert out == plain
    out, done = scenario("hf_init_weights", preload=True, LOCAL_RANK=1, ACCELERATE_USE_FSDP="true")
    assert out == plain and done.stderr == ""


def test_quiet_silences_the_summary():
    with tempfile.TemporaryDirectory() as directory:
        report = os.path.join(directory, "report.json")
        out, done = scenario("hf_init_weights", preload=True, LOCAL_RANK=1, FSDPSKIP="on", FSDPSKIP_LOG="quiet",
                             FSDPSKIP_REPORT=report)
        assert done.stderr == ""
        with open(report) as written:
            assert json.load(written)["storages_skipped"] > 0, "quiet, and still skipping"


def test_debug_and_trace_levels():
    _, debug = scenario("views", preload=True, LOCAL_RANK=1, FSDPSKIP="on", FSDPSKIP_LOG="debug")
    assert "fsdpskip: first tag: storage" in debug.stderr and "fsdpskip: skipped init of storage" in debug.stderr
    assert "-> skip" not in debug.stderr
    _, trace = scenario("views", preload=True, LOCAL_RANK=1, FSDPSKIP="on", FSDPSKIP_LOG="trace")
    assert "fsdpskip: normal_ -> skip: storage" in trace.stderr and "fsdpskip: fill_ -> skip: storage" in trace.stderr
