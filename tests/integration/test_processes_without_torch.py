"""LD_PRELOAD reaches every child of a rank: shells, tools, compilers. With
the variables of an active rank set, they must not notice the preload."""
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


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c)[:40])
@pytest.mark.parametrize("variables", [{"FSDPSKIP": "on", "LOCAL_RANK": "1"},
                                       {"LOCAL_RANK": "1", "ACCELERATE_USE_FSDP": "1",
                                        "FSDP_CPU_RAM_EFFICIENT_LOADING": "1"}], ids=["on", "auto"])
def test_same_output_status_and_stderr(command, variables):
    plain = run(command, preload=False, input="b\na\nc\n", **variables)
    preloaded = run(command, preload=True, input="b\na\nc\n", **variables)
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
