"""Helpers for the integration tests: run real programs with and without the
preload and hand back what they printed. Paths come from ctest's environment."""
import functools
import json
import os
import shutil
import subprocess
import sys

PRELOAD = os.environ["FSDPSKIP_PRELOAD"]
PLUGIN = os.environ["FSDPSKIP_PLUGIN_FILE"]
SOURCE_DIR = os.environ["FSDPSKIP_SOURCE_DIR"]
COMMAND = os.environ["FSDPSKIP_COMMAND"]  # the fsdpskip command, in the build tree
BUILD_DIR = os.environ["FSDPSKIP_BUILD_DIR"]
HERE = os.path.dirname(os.path.abspath(__file__))
SCENARIOS = os.path.join(HERE, "scenarios.py")


def mapped_library(prefix):
    """The path of the library this process maps whose name starts with `prefix`."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1] if len(line.split()) >= 6 else ""
            if os.path.basename(path).startswith(prefix):
                return path
    raise RuntimeError("no %s is mapped in this process" % prefix)


def system_library(name):
    """`name` (libm.so.6, libdl.so.2) in the directory of the libc this Python
    runs on: the system's own layout (/lib/<multiarch triplet>/ on Debian),
    not a path written out for one architecture."""
    return os.path.join(os.path.dirname(mapped_library("libc.so")), name)


def torch_library():
    """The libtorch_cpu.so that PYTHON's torch maps. pytest runs under PYTHON
    (tests/CMakeLists.txt), so it is this process's, once torch is imported
    here: no process of its own."""
    import torch  # noqa: F401
    return os.path.realpath(mapped_library("libtorch_cpu.so"))


LIBM = system_library("libm.so.6")  # a real library that is harmless to preload
LOAD_MODEL = os.path.join(SOURCE_DIR, "tools", "workloads", "load_model.py")
sys.path.insert(0, os.path.join(SOURCE_DIR, "tools", "workloads"))
import launch  # noqa: E402
import policy_variables  # noqa: E402
from measure import summary_lines  # noqa: E402,F401
from launch import PYTHON  # noqa: E402,F401

# tools/sanitize: ASan's allocator commits shadow memory and headers of its
# own, so resident memory says nothing of fsdpskip's saving there.
SANITIZED = bool(os.environ.get("FSDPSKIP_SANITIZER_PRELOAD"))


def required(what):
    """Whether this run declares `what` required: FSDPSKIP_REQUIRED, the words
    of the build's suite (-DFSDPSKIP_REQUIRED: Python modules, the training
    flows' frameworks) and of the run (tools/test: root, the pip venv, the
    module system)."""
    return what in os.environ.get("FSDPSKIP_REQUIRED", "").split()


def require(what, met, reason):
    """A test that needs `what` and lacks it (`met` false) fails where this
    run declares it required and is skipped, saying `reason`, elsewhere."""
    import pytest
    if met:
        return
    if required(what):
        pytest.fail("%s: required here (FSDPSKIP_REQUIRED names %s)" % (reason, what), pytrace=False)
    pytest.skip(reason)


def module_or_skip(name):
    """The module `name`, for tests that need it (see require)."""
    import importlib
    if required(name):
        return importlib.import_module(name)
    import pytest
    return pytest.importorskip(name)


def environment(preload, **variables):
    """This process's environment without any variable that could change
    fsdpskip's decision (policy_variables: options.def), then `variables`."""
    env = policy_variables.without_policy(os.environ)
    if preload:
        # A sanitized build (tools/sanitize) needs the sanitizer's runtime first.
        env["LD_PRELOAD"] = " ".join(filter(None, [os.environ.get("FSDPSKIP_SANITIZER_PRELOAD"), PRELOAD]))
    env.update({k: str(v) for k, v in variables.items()})
    return env


def run(command, preload=True, timeout=600, input=None, cwd=None, **variables):
    """Runs a command; returns the CompletedProcess (text mode)."""
    return subprocess.run(command, env=environment(preload, **variables), capture_output=True, text=True,
                          timeout=timeout, input=input, cwd=cwd)


def baseline(command, preload=False, **variables):
    """run(), once per test file for each command and variables: the run
    that several tests compare theirs against (by default the one without
    the preload). The programs are seeded, so a second run would print the
    same, and each costs a process that imports torch."""
    return _baseline(tuple(command), preload, tuple(sorted((k, str(v)) for k, v in variables.items())))


@functools.lru_cache(maxsize=None)
def _baseline(command, preload, variables):
    return run(list(command), preload=preload, **dict(variables))


def scenario(name, preload=True, **variables):
    """Runs one of scenarios.py's scenarios, its run without the preload once
    (baseline); returns (its JSON, the process)."""
    command = [PYTHON, SCENARIOS, name]
    done = run(command, **variables) if preload else baseline(command, **variables)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), done


def fsdpskip_lines(stderr):
    return [line for line in stderr.splitlines() if "fsdpskip:" in line]


def said_by_fsdpskip(lines):
    """fsdpskip's own lines (not a warning whose path mentions it), less the
    start-up decision that every process prints at debug level."""
    return [line for line in lines if line.startswith("fsdpskip:") and "decision at start-up" not in line]


def torchrun(script_args, out_dir, nproc=2, preload=True, timeout=600, prefix=(), agent=False, **variables):
    """A real multi-process job on loopback (tools/workloads/launch.py);
    returns (completed process, [rank JSON...]). The ranks are started
    directly, with the variables torchrun gives them: its agent is one more
    process that imports torch (its cost per job: docs/testing.md). The
    tests of the path users run, torchrun under the preload or under
    `fsdpskip run`, ask for the agent (where the torch's can start)."""
    done = launch.run(script_args, environment(preload, **variables), nproc=nproc, timeout=timeout, prefix=prefix,
                      agent=agent)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ranks = []
    for rank in range(nproc):
        path = os.path.join(out_dir, "rank%d.json" % rank)
        if os.path.exists(path):
            with open(path) as f:
                ranks.append(json.load(f))
    return done, ranks


def rank_lines(done, rank):
    """A worker's lines from a torchrun job: --tee copies them, prefixed with
    [default<rank>]:, to the agent's stdout and stderr."""
    prefix = "[default%d]:" % rank
    return [line[len(prefix):] for line in (done.stdout + done.stderr).splitlines() if line.startswith(prefix)]


# ELF e_machine: the other of the two architectures fsdpskip supports.
EM_X86_64, EM_AARCH64 = 62, 183
MACHINE_NAMES = {EM_X86_64: "x86-64", EM_AARCH64: "AArch64"}


def elf_machine(path):
    with open(path, "rb") as f:
        header = f.read(20)
    return int.from_bytes(header[18:20], "little")


def other_architecture_copy(source, destination):
    """A copy of the ELF file `source` that says it is for the other
    architecture (e_machine patched): what an aarch64 plugin or libtorch
    looks like on x86-64, and the reverse. Returns (destination, its
    architecture's name, this one's)."""
    shutil.copy(source, destination)
    here = elf_machine(source)
    other = EM_AARCH64 if here == EM_X86_64 else EM_X86_64
    with open(destination, "r+b") as f:
        f.seek(18)
        f.write(other.to_bytes(2, "little"))
    return str(destination), MACHINE_NAMES[other], MACHINE_NAMES[here]


def foreign_plugin(directory):
    """A copy of the plugin claiming another libtorch (build-id ...deadbeef,
    torch 9.9.9): what a plugin built for another torch looks like."""
    foreign = os.path.join(str(directory), "libfsdpskip_torch.so")
    shutil.copy(PLUGIN, foreign)
    identity = os.path.join(str(directory), "identity")
    subprocess.run(["objcopy", "--dump-section", ".fsdpskip_torch_id=%s" % identity, foreign], check=True)
    with open(identity) as f:  # the same plugin ABI, another torch
        lines = [line for line in f.read().rstrip("\0").splitlines() if line.split("=")[0] not in
                 ("build-id", "torch", "libtorch")]
    with open(identity, "w") as f:
        f.write("build-id=00000000000000000000000000000000deadbeef\ntorch=9.9.9\nlibtorch=/elsewhere\n" +
                "".join(line + "\n" for line in lines))
    subprocess.run(["objcopy", "--update-section", ".fsdpskip_torch_id=%s" % identity, foreign], check=True)
    return foreign
