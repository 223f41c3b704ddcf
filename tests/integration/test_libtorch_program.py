"""An unmodified LibTorch C++ program under the preload."""
import os

import pytest

from harness import baseline, fsdpskip_lines, run, summary_lines

pytestmark = [pytest.mark.every_torch, pytest.mark.second_build, pytest.mark.emulated, pytest.mark.sanitized]

PROGRAM = os.environ["FSDPSKIP_LIBTORCH_MODEL"]


def parameters(stdout):
    """name -> {bytes, digest, all_zero, first} from the program's lines."""
    result = {}
    for line in stdout.splitlines():
        if line.startswith("error:"):
            continue
        name, *fields = line.split()
        result[name] = dict(field.split("=") for field in fields)
    return result


def test_rank0_is_bitwise_identical_to_no_preload():
    plain = baseline([PROGRAM])
    rank0 = run([PROGRAM], LOCAL_RANK=0, FSDPSKIP="on")
    assert plain.returncode == rank0.returncode == 0
    assert rank0.stdout == plain.stdout
    assert rank0.stderr == plain.stderr == ""


def test_rank1_skips_every_parameter_init_and_reads_the_values_without_it():
    """The inits of the parameters of a page or more (the Linear's and
    Embedding's weights, the sentinel) are skipped; printing them reads
    them, which materializes each first: every value, the sentinel written
    by hand then overwritten by normal_ too, is bitwise the run without the
    preload, and so is a seeded randn after them."""
    plain = parameters(baseline([PROGRAM]).stdout)
    done = run([PROGRAM], LOCAL_RANK=1, FSDPSKIP="on")
    assert done.returncode == 0
    assert len(plain) == 9 and parameters(done.stdout) == plain
    summary = summary_lines(done.stderr, 1)
    assert len(summary) == 1 and "on 3 storages" in summary[0] and "materialized 3" in summary[0], done.stderr


def test_skipped_call_raises_what_the_kernel_raises():
    plain = baseline([PROGRAM]).stdout.splitlines()[-1]
    rank1 = run([PROGRAM], LOCAL_RANK=1, FSDPSKIP="on").stdout.splitlines()[-1]
    assert plain.startswith("error: normal expects std >= 0.0")
    assert rank1 == plain


def test_setenv_at_run_time_turns_it_on():
    """The program sets FSDPSKIP=on itself with setenv(3) before building its
    modules; the launcher gave it only LOCAL_RANK=1."""
    plain = parameters(run([PROGRAM, "FSDPSKIP=on"], preload=False).stdout)
    done = run([PROGRAM, "FSDPSKIP=on"], LOCAL_RANK=1)
    assert done.returncode == 0, done.stderr
    assert parameters(done.stdout) == plain, done.stdout
    assert "on 3 storages" in fsdpskip_lines(done.stderr)[0], done.stderr
    # Set and removed again before any module exists: nothing changes.
    done = run([PROGRAM, "FSDPSKIP=on", "-FSDPSKIP"], LOCAL_RANK=1)
    assert parameters(done.stdout) == plain and done.stderr == ""


def test_nccl_receives_resolve_skipped_parameters():
    """Rank 0's values arriving through NCCL's C API (ncclBroadcast, ncclBcast,
    ncclRecv into a stand-in libnccl.so.2): every skipped parameter is
    resolved by the receive, and holds rank 0's values."""
    receiver = os.environ["FSDPSKIP_NCCL_RECEIVER"]
    plain = run([receiver], preload=False)
    done = run([receiver], LOCAL_RANK=1, FSDPSKIP="on")
    assert plain.returncode == done.returncode == 0, done.stderr
    assert done.stdout == plain.stdout and done.stdout.count("equal_to_rank0=1") == 6, done.stdout
    summary = fsdpskip_lines(done.stderr)
    assert len(summary) == 1, done.stderr
    # The weights (a page or more each); the biases' inits ran.
    assert "on 3 storages" in summary[0] and summary[0].endswith("resolved by overwrite 3, by free 0, pending 0")
