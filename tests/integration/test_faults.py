"""Faults while loading (issue 15, point 4): a rank killed or exiting from a
thread in the middle of loading, stderr closed or a pipe whose reader died,
the report's directory removed or full, forked children exiting either way.
Each runs with and without the preload: the program's exit status and
output are the same, fsdpskip neither crashes nor hangs, and a report is
complete or absent, never a half-written file under its name."""
import json
import os
import re
import shutil
import signal
import subprocess
import textwrap

import pytest

from harness import PYTHON, environment, require, run

pytestmark = [pytest.mark.sanitized]

LIBTORCH_PROGRAM = os.environ["FSDPSKIP_LIBTORCH_MODEL"]
ACTIVE = {"LOCAL_RANK": "1", "FSDPSKIP": "on"}

# Loads a model's placeholders (skipped on rank 1), prints a line, then does
# what FAULT says, part way through a loading that never receives rank 0's data.
LOADER = textwrap.dedent("""\
    import ctypes, os, signal, sys, threading, time
    import torch, torch.nn as nn
    kept = [nn.Linear(256, 256) for _ in range(16)]
    print("loaded", flush=True)
    fault = sys.argv[1]
    if fault == "sigterm":
        os.kill(os.getpid(), signal.SIGTERM)
    elif fault == "sigterm-handled":  # a framework's handler that exits cleanly
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))
        os.kill(os.getpid(), signal.SIGTERM)
    elif fault == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif fault == "os-exit-from-thread":
        threading.Thread(target=lambda: os._exit(4)).start()
        while True:
            kept.append(nn.Linear(64, 64))
    elif fault == "exit-from-thread":  # C exit() from a watchdog: atexit handlers run in that thread
        # The main thread is parked first: exit() while it runs torch would
        # crash the program with or without fsdpskip (its libraries' static
        # destructors; seen on CPython 3.14 without the preload).
        parked = threading.Event()
        def leave():
            parked.wait()
            ctypes.CDLL(None).exit(5)
        threading.Thread(target=leave).start()
        kept.append(nn.Linear(64, 64))
        parked.set()
        threading.Event().wait()
    elif fault == "close-stderr":  # as coreutils' close_stdout does at exit
        os.close(2)
    elif fault in ("fork-exit", "fork-_exit"):
        child = os.fork()
        if child == 0:
            nn.Linear(32, 32)
            if fault == "fork-exit":
                sys.exit(0)
            os._exit(0)
        os.waitpid(child, 0)
    """)


def loader(tmp_path, fault, preload, report=None, stderr=subprocess.PIPE, **variables):
    script = tmp_path / "loader.py"
    script.write_text(LOADER)
    env = environment(preload, **(dict(ACTIVE, **variables) if preload else {}))
    if report is not None:
        env["FSDPSKIP_REPORT"] = str(report)
    return subprocess.run([PYTHON, str(script), fault], env=env, stdout=subprocess.PIPE, stderr=stderr, text=True,
                          timeout=300, cwd=str(tmp_path))


def same_status_and_output(tmp_path, fault, status):
    """Runs the fault without the preload and on an active rank with a report;
    both end with `status` and print the same. Returns (the report's path,
    the active run)."""
    plain = loader(tmp_path, fault, preload=False)
    report = tmp_path / "report.json"
    active = loader(tmp_path, fault, preload=True, report=report)
    assert plain.returncode == active.returncode == status, (plain.returncode, active.returncode, active.stderr)
    assert plain.stdout == active.stdout == "loaded\n"
    return report, active


def leftovers(directory):
    return sorted(name for name in os.listdir(str(directory)) if ".partial" in name)


@pytest.mark.parametrize("fault, status", [("sigterm", -signal.SIGTERM), ("sigkill", -signal.SIGKILL),
                                           ("os-exit-from-thread", 4)])
def test_a_rank_that_dies_mid_load_keeps_its_status_and_leaves_no_report(tmp_path, fault, status):
    report, _ = same_status_and_output(tmp_path, fault, status)
    assert not report.exists() and leftovers(tmp_path) == [], "a process that never reached exit writes nothing"


@pytest.mark.parametrize("fault, status", [("sigterm-handled", 3), ("exit-from-thread", 5)])
def test_a_rank_that_exits_mid_load_writes_a_complete_report(tmp_path, fault, status):
    report, _ = same_status_and_output(tmp_path, fault, status)
    with open(str(report)) as f:
        data = json.load(f)
    assert data["storages_skipped"] >= 8 and data["pending_count"] == len(data["pending"]) > 0, data
    assert leftovers(tmp_path) == []


def test_stderr_closed_before_exit_changes_nothing(tmp_path):
    report, active = same_status_and_output(tmp_path, "close-stderr", 0)
    assert active.stderr == ""
    assert json.loads(report.read_text())["pending_count"] > 0, "the report does not need stderr"


def test_stderr_closed_from_the_start_keeps_fsdpskip_out_of_the_file_that_takes_its_place(tmp_path):
    """Started with stderr closed, the program's first file is descriptor 2;
    fsdpskip's lines at exit must not land in it."""
    script = tmp_path / "log_first.py"
    script.write_text(textwrap.dedent("""\
        import os
        log = os.open("log.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        import torch, torch.nn as nn
        kept = nn.Linear(64, 64)
        os.write(log, b"descriptor %d\\n" % log)
        """))
    done = subprocess.run(["sh", "-c", 'exec "$@" 2>&-', "sh", PYTHON, str(script)], env=environment(True, **ACTIVE),
                          stdout=subprocess.PIPE, text=True, timeout=300, cwd=str(tmp_path))
    assert done.returncode == 0
    assert (tmp_path / "log.txt").read_text() == "descriptor 2\n"


def test_a_dead_stderr_reader_does_not_turn_the_exit_status_into_sigpipe():
    """A LibTorch program does not ignore SIGPIPE (Python does): fsdpskip's
    summary at exit, written into a pipe whose reader is gone, must not kill
    it."""
    results = []
    for preload in (False, True):
        read_end, write_end = os.pipe()
        os.close(read_end)
        try:
            done = subprocess.run([LIBTORCH_PROGRAM], env=environment(preload, **(ACTIVE if preload else {})),
                                  stdout=subprocess.PIPE, stderr=write_end, text=True, timeout=300)
        finally:
            os.close(write_end)
        results.append(done)
    plain, active = results
    assert plain.returncode == active.returncode == 0, (plain.returncode, active.returncode)
    assert plain.stdout.splitlines()[0].split()[0] == active.stdout.splitlines()[0].split()[0]


@pytest.mark.parametrize("fault", ["fork-exit", "fork-_exit"])
def test_a_forked_child_exiting_either_way_reports_nothing_and_its_parent_reports(tmp_path, fault):
    report = tmp_path / "report-%p.json"
    plain = loader(tmp_path, fault, preload=False)
    active = loader(tmp_path, fault, preload=True, report=report)
    assert plain.returncode == active.returncode == 0 and plain.stdout == active.stdout
    reports = sorted(name for name in os.listdir(str(tmp_path)) if name.startswith("report-"))
    assert len(reports) == 1, "only the parent reports: %s" % reports
    assert json.loads((tmp_path / reports[0]).read_text())["pending_count"] > 0
    summaries = [line for line in active.stderr.splitlines() if line.startswith("fsdpskip: local rank 1")]
    assert len(summaries) == 1, active.stderr


def test_a_report_directory_removed_before_exit_is_made_again_or_named(tmp_path):
    """The report's directory removed while the program runs is made again
    at exit; replaced by a file, it is named in one line."""
    directory = tmp_path / "reports"
    for replacement, report_written in (("", True), ("open(%r, 'w').close()\n" % str(directory), False)):
        directory.mkdir()
        script = tmp_path / "remove.py"
        script.write_text("import os, torch, torch.nn as nn\nkept = nn.Linear(64, 64)\nos.rmdir(%r)\n%s"
                          % (str(directory), replacement))
        done = run([PYTHON, str(script)], FSDPSKIP_REPORT=str(directory / "r.json"), **ACTIVE)
        assert done.returncode == 0
        errors = [line for line in done.stderr.splitlines() if "FSDPSKIP_REPORT" in line]
        if report_written:
            assert errors == [] and (directory / "r.json").is_file(), done.stderr
            shutil.rmtree(str(directory))
        else:
            assert len(errors) == 1 and "cannot create directory %s: Not a directory" % directory in errors[0] and \
                "no report written" in errors[0], done.stderr


def test_a_full_filesystem_leaves_no_partial_report(tmp_path):
    """A tmpfs of one page: the report (its pending list) does not fit."""
    mount = tmp_path / "full"
    mount.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4k", "tmpfs", str(mount)]).returncode == 0
    require("root", mounted, "cannot mount a tmpfs here (not root)")
    try:
        done = loader(tmp_path, "none", preload=True, report=mount / "r.json")
        assert done.returncode == 0 and done.stdout == "loaded\n"
        errors = [line for line in done.stderr.splitlines() if "FSDPSKIP_REPORT" in line]
        assert len(errors) == 1 and "No space left on device" in errors[0], done.stderr
        assert os.listdir(str(mount)) == [], "the partial file is removed"
    finally:
        subprocess.run(["umount", str(mount)])


# A thread parks inside dl_iterate_phdr, holding the dynamic linker's
# dl_load_write_lock, and the main thread forks meanwhile: fork does not reset
# that lock, so a child that looks anything up through it waits forever.
# The parent made one call into torch; the child makes calls it never made.
FORK_UNDER_THE_LINKERS_LOCK = textwrap.dedent("""\
    import ctypes, os, sys, threading, time, torch
    torch.empty(4).normal_()
    CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
    inside = threading.Event()
    def hold(info, size, data):
        inside.set()
        time.sleep(1)
        return 1
    callback = CALLBACK(hold)
    holder = threading.Thread(target=ctypes.CDLL(None).dl_iterate_phdr, args=(callback, None))
    holder.start()
    inside.wait()
    child = os.fork()
    if child == 0:
        weight = torch.empty(64)
        weight.uniform_(-1, 1); weight.fill_(0.5); weight.zero_(); weight.copy_(torch.ones(64))
        os._exit(0 if bool(weight.eq(1).all()) else 1)
    deadline = time.monotonic() + 120  # a hang, not a speed: the child needs milliseconds
    finished = 0
    while not finished and time.monotonic() < deadline:
        finished, status = os.waitpid(child, os.WNOHANG)
        time.sleep(0.05)
    if not finished:
        os.kill(child, 9)
        print("the child hung")
        sys.exit(1)
    holder.join()
    print("child exit status", os.waitstatus_to_exitcode(status))
    """)


@pytest.mark.every_torch
@pytest.mark.second_build
@pytest.mark.parametrize("variables", [{}, ACTIVE], ids=["inactive", "active"])
def test_a_child_forked_while_a_thread_holds_the_linkers_lock_calls_into_torch(variables):
    """fsdpskip looks up torch's originals through that lock: all of them
    after the first call, never in a child for a call its parent made none of."""
    plain = run([PYTHON, "-c", FORK_UNDER_THE_LINKERS_LOCK], preload=False, **variables)
    preloaded = run([PYTHON, "-c", FORK_UNDER_THE_LINKERS_LOCK], **variables)
    assert plain.stdout == "child exit status 0\n", plain.stdout + plain.stderr
    assert preloaded.stdout == plain.stdout and preloaded.returncode == 0, preloaded.stdout + preloaded.stderr


# A failure inside the plugin (an allocation) injected into one callback
# (the fault-injection build of the plugin, FSDPSKIP_INJECT_FAULT): nothing
# unwinds into torch, one line names it, and the calls it touched run as
# without fsdpskip. The decisions fail as they start: every init then runs;
# `stand_in_like`, likewise, after the verdict to skip; `skipped:allocation`
# at its first allocation, after the stand-in ran: the init then runs on the
# parameter itself; `stand_in_generator` (a random init's copy of its
# generator argument) before the stand-in runs: the init runs on self; and
# `zero_lazily` after a lazy zero's stand-in.
@pytest.mark.parametrize("fault, scenario, expected", [
    ("decide_init,decide_fill", "hf_init_weights", "plain"),
    ("stand_in_like", "hf_init_weights", "plain"),
    ("skipped:allocation", "hf_init_weights", "plain"),
    # A run on self after the stand-in's: it draws from the caller's generator
    # argument, which the stand-in run (given a copy) cannot have moved from.
    ("skipped:allocation", "generators_after_inits", "plain"),
    ("stand_in_generator", "generators_after_inits", "plain"),
    ("zero_lazily", "not_parameters", "plain"),
])
def test_a_callback_that_fails_inside_leaves_the_call_as_without_fsdpskip(fault, scenario, expected):
    from harness import SCENARIOS, baseline, fsdpskip_lines, scenario as run_scenario
    plain, _ = run_scenario(scenario, preload=False)
    active_done = baseline([PYTHON, SCENARIOS, scenario], preload=True, **ACTIVE)  # each fault's yardstick
    assert active_done.returncode == 0, active_done.stderr
    active = json.loads(active_done.stdout)
    faulty, done = run_scenario(scenario, FSDPSKIP_PLUGIN=os.environ["FSDPSKIP_FAULTS_PLUGIN"],
                                FSDPSKIP_INJECT_FAULT=fault, **ACTIVE)
    assert faulty == (plain if expected == "plain" else active), (faulty, plain, active)
    callback = fault.split(":")[0].split(",")[0]
    errors = [line for line in fsdpskip_lines(done.stderr) if "internal error" in line and "error:" in line]
    assert len(errors) == 1 and "internal error in %s (std::bad_alloc)" % callback in errors[0], done.stderr
    summary = [line for line in fsdpskip_lines(done.stderr) if "internal errors" in line]
    assert len(summary) == 1 and re.search(r"; [1-9]\d* internal errors", summary[0]), done.stderr
    # Nothing left skipped but unaccounted: what is pending is what the run
    # without the fault leaves pending (its never-synced parameters), or nothing.
    pending = int(re.search(r"pending (\d+)", summary[0]).group(1))
    usual = re.search(r"pending (\d+)", active_done.stderr)
    assert pending == (0 if scenario in ("hf_init_weights", "generators_after_inits") else int(usual.group(1))), (
        summary, active_done.stderr)
