"""LD_PRELOAD reaches every child of a rank: shells, tools, compilers. With
the variables of an active rank set, they must not notice the preload."""
import shutil

import pytest

from harness import PYTHON, run

COMMANDS = [
    ["/bin/true"],
    ["/bin/false"],
    ["bash", "-c", "echo out; echo err >&2; exit 3"],
    ["ls", "-d", "/", "/nonexistent"],
    [PYTHON, "-c", "import sys, json; print(json.dumps(sys.argv)); sys.exit(4)"],
    ["bash", "-c", "exec env LC_ALL=C sort -r"],  # a shell that execs another program
    ["cc", "--version"],
]


ACTIVE = pytest.mark.parametrize("variables", [{"FSDPSKIP": "on", "LOCAL_RANK": "1"},
                                                {"LOCAL_RANK": "1", "ACCELERATE_USE_FSDP": "1",
                                                 "FSDP_CPU_RAM_EFFICIENT_LOADING": "1"}], ids=["on", "auto"])

# A small C project, and what a rank's shell does with it.
PROJECT = {
    "hello.c": '#include <stdio.h>\nint main(void) { puts("hello"); return 0; }\n',
    "Makefile": "hello: hello.c\n\tcc -O1 -o $@ $<\n\t./hello\n",
    "CMakeLists.txt": "cmake_minimum_required(VERSION 3.13)\nproject(hello C)\nadd_executable(hello hello.c)\n",
}
SCRIPTS = {
    "pipeline": "seq 1 20000 | sort -rn | head -3 | tr 0-9 a-j; set -o pipefail; seq 1 100000 | head -1;"
                " echo status $?; false | cat; echo status $?",
    "make": "make && make",
    # Fixed dates: a commit's hash depends on them.
    "git": "export GIT_AUTHOR_DATE='@1000000000 +0000' GIT_COMMITTER_DATE='@1000000000 +0000'; git init -q -b main . && git add -A &&"
           " git -c user.name=rank -c user.email=rank@node commit -q -m one && git log --format='%H %s' &&"
           " git rm -q --cached Makefile && git status --short && git diff --cached --stat",
    # CMake 3.26 and later print how long configuring took.
    "cmake": "cmake -S . -B build | sed -E 's/ \\([0-9.]+s\\)$//' && cmake --build build && ./build/hello",
    "pip": "%s -m pip --version" % PYTHON,
}


def assert_active_there(variables):
    """The preload reaches a program run this way and is active in it:
    without that, an unchanged output would say nothing."""
    done = run(["/bin/true"], FSDPSKIP_LOG="debug", **variables)
    assert "decision at start-up: active" in done.stderr, done.stderr


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c)[:40])
@ACTIVE
def test_same_output_status_and_stderr(command, variables):
    assert_active_there(variables)
    plain = run(command, preload=False, input="b\na\nc\n", **variables)
    preloaded = run(command, preload=True, input="b\na\nc\n", **variables)
    assert (preloaded.returncode, preloaded.stdout, preloaded.stderr) == (plain.returncode, plain.stdout,
                                                                          plain.stderr)


@pytest.mark.parametrize("script", SCRIPTS)
@ACTIVE
def test_shells_builds_and_git_in_a_project_are_unchanged(tmp_path, script, variables):
    assert_active_there(variables)
    def in_a_fresh_project(preload):
        project = tmp_path / "project"  # the same path for both runs: paths appear in the output
        shutil.rmtree(str(project), ignore_errors=True)
        project.mkdir()
        for name, text in PROJECT.items():
            (project / name).write_text(text)
        return run(["bash", "-c", SCRIPTS[script]], preload=preload, cwd=str(project), **variables)
    if script == "pip" and run([PYTHON, "-c", "import pip"], preload=False).returncode:
        pytest.skip("this Python has no pip (the torch roots: Debian's python3-pip is not in them)")
    plain, preloaded = in_a_fresh_project(False), in_a_fresh_project(True)
    assert plain.returncode == 0 and plain.stdout, plain.stderr  # the script itself works here
    assert (preloaded.returncode, preloaded.stdout, preloaded.stderr) == (plain.returncode, plain.stdout,
                                                                          plain.stderr)


def test_torch_imported_but_nothing_initialised_is_quiet_and_says_so_once_at_debug():
    """A helper (torchrun's agent, a DataLoader worker) that imports torch and
    makes no parameter prints nothing; at debug level it says why, once."""
    done = run([PYTHON, "-c", "import torch"], FSDPSKIP="on", LOCAL_RANK="1")
    assert done.returncode == 0 and "fsdpskip" not in done.stderr, done.stderr
    debug = run([PYTHON, "-c", "import torch"], FSDPSKIP="on", LOCAL_RANK="1", FSDPSKIP_LOG="debug")
    said = [line for line in debug.stderr.splitlines() if "no parameter was initialised" in line]
    assert debug.returncode == 0 and len(said) == 1, debug.stderr
