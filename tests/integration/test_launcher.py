"""The tests' launcher (tools/workloads/launch.py) runs a job again only when
a rank ended in one of torch's exit races (launch.TORCH_EXIT_RACES), at most
launch.TORCH_EXIT_RERUNS times; any other failure stands at once. The ranks
here are real processes that end as those races end them: std::terminate
called for real through libstdc++ (what torch 2.15's gloo worker does), and a
segfault after the backtrace UCX's handler prints (torch 2.6's worker), whose
lines are written out here as a real one reads, not taken from the rule."""
import os

import pytest

import harness  # noqa: F401 (puts tools/workloads on the path)
import launch  # noqa: E402

RANK = r'''
import ctypes, os, signal, sys
runs, ending, bad_runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
if os.environ["RANK"] != "1":
    sys.exit(0)
with open(runs, "a") as count:
    count.write("run\n")
with open(runs) as count:
    run = len(count.readlines())
if run > bad_runs:
    print("trained")
    sys.exit(0)
if ending == "terminate":
    ctypes.CDLL("libstdc++.so.6")._ZSt9terminatev()
# A segfault after UCX's backtrace: the race's (gloo's worker dropping a
# Python object), or one with either of its two frames another.
frames = {"gloo-segfault": ("_ZN3c1012PyObjectSlot19maybe_destroy_pyobjEv", "_ZN4c10d16ProcessGroupGloo7runLoopEi"),
          "segfault-outside-gloo": ("_ZN3c1012PyObjectSlot19maybe_destroy_pyobjEv", "_ZN5torch3jit5GraphD1Ev"),
          "gloo-segfault-elsewhere": ("_ZN4gloo9transport3tcp4Pair4recvEv", "_ZN4c10d16ProcessGroupGloo7runLoopEi")}
if ending in frames:
    sys.stderr.write(
        "[host:1234:0:1240] Caught signal 11 (Segmentation fault: address not mapped to object at address 0x8)\n"
        "==== backtrace (tid:   1240) ====\n"
        " 0  /usr/lib/x86_64-linux-gnu/libucs.so.0(ucs_handle_error+0x2e4) [0x7f0000000000]\n"
        " 1  /lib/libtorch_python.so(%s+0x4a) [0x7f0000000001]\n"
        " 2  /lib/libtorch_cpu.so(%s+0x1c2) [0x7f0000000002]\n" % frames[ending])
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGSEGV)
sys.stderr.write("Traceback (most recent call last):\nRuntimeError: a rank's own failure\n")
sys.exit(1)
'''


def job(tmp_path, ending, bad_runs):
    """A 2-rank job whose rank 1 ends as `ending` in its first `bad_runs`
    runs and trains after; returns what the launcher returned and how many
    times rank 1 ran."""
    script, runs = tmp_path / "rank.py", tmp_path / "runs"
    script.write_text(RANK)
    done = launch.run([str(script), str(runs), ending, str(bad_runs)], dict(os.environ), nproc=2, timeout=120,
                      agent=False)
    return done, len(runs.read_text().splitlines())


@pytest.mark.parametrize("ending,bad_runs", [("terminate", 1), ("gloo-segfault", launch.TORCH_EXIT_RERUNS)])
def test_a_job_that_ended_in_a_torch_exit_race_is_run_again_and_its_rerun_stands(tmp_path, ending, bad_runs):
    done, runs = job(tmp_path, ending, bad_runs)
    assert done.returncode == 0 and "trained" in done.stdout, done.stderr
    assert runs == bad_runs + 1


def test_a_job_that_ends_in_the_race_every_time_fails_after_its_reruns(tmp_path):
    done, runs = job(tmp_path, "terminate", bad_runs=99)
    assert done.returncode != 0 and "terminate called without an active exception" in done.stderr, done.stderr
    assert runs == 1 + launch.TORCH_EXIT_RERUNS


@pytest.mark.parametrize("ending", ["segfault-outside-gloo", "gloo-segfault-elsewhere", "error"])
def test_any_other_failure_stands_without_a_rerun(tmp_path, ending):
    """Segfaults whose backtrace lacks one of the race's two frames, and a
    rank's own error."""
    done, runs = job(tmp_path, ending, bad_runs=1)
    assert done.returncode != 0 and runs == 1, done.stderr
