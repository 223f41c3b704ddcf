"""What the manual states that has a home elsewhere: the headline and the
summary line are the node benchmark's last run, the framework tables
are the framework suite's last run as its generator renders them, the
package list is tools/bootstrap's, and every README command is run by a
named test (the tables generated from the source's own tables, in
docs/configuration.md, docs/report.md and docs/torch-symbols.md, are
tests/unit/test_documentation.cc's). Also the one generated source file:
MT19937's jump table is what tools/mt19937-jumps writes."""
import os
import re
import subprocess
import sys

from harness import SOURCE_DIR

README = os.path.join(SOURCE_DIR, "README.md")
FRAMEWORKS_PAGE = os.path.join(SOURCE_DIR, "docs", "frameworks.md")
FRAMEWORKS = os.path.join(SOURCE_DIR, "tools", "frameworks", "run")
NODE_RESULTS = os.path.join(SOURCE_DIR, "bench-results", "node.md")


def table_after(heading, page=README):
    """The first Markdown table after `heading` in `page`."""
    with open(page) as f:
        lines = f.read().split("\n")
    start = lines.index(heading)
    rows = []
    for line in lines[start + 1:]:
        if line.startswith("|"):
            rows.append(line)
        elif rows:
            break
    return "\n".join(rows) + "\n"


def framework_suite(option):
    rendered = subprocess.run([sys.executable, FRAMEWORKS, option], capture_output=True, text=True)
    assert rendered.returncode == 0, rendered.stderr
    return rendered.stdout


def test_the_generators_jump_table_is_what_its_tool_writes():
    checked = subprocess.run([sys.executable, os.path.join(SOURCE_DIR, "tools", "mt19937-jumps"), "--check"],
                             capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr


def test_the_headline_and_the_summary_line_are_the_node_benchmarks_last_run():
    """The README's first table is tools/bench/node's headline, and the
    summary line the README and docs/report.md show is one that run printed."""
    assert table_after("# fsdpskip") == table_after("## Headline", NODE_RESULTS)
    with open(NODE_RESULTS) as f:
        printed = re.findall(r"^- \S+ on: `(fsdpskip: .*)`$", f.read(), re.M)
    for page in (README, os.path.join(SOURCE_DIR, "docs", "report.md")):
        with open(page) as f:
            shown = re.findall(r"^fsdpskip: local rank .*$", f.read(), re.M)
        assert shown and all(line in printed for line in shown), (page, shown, printed)


def test_framework_tables_are_the_framework_suites_last_results():
    assert table_after("## The measured table", FRAMEWORKS_PAGE) == framework_suite("--table")
    assert table_after("## Does it help you?") == framework_suite("--summary")


# Every command of the README's shell blocks, and the test that runs it as
# written or with the substitution stated (a 2-rank job for 8 ranks, this
# machine's paths and Python, a tiny model for the demo's 0.5B one). A
# command added to the README without a test here fails below.
README_COMMANDS = {
    "pip install scikit-build-core nlohmann-json": "tests/system/test_pip_install.py::installed",
    "pip install --no-build-isolation ./fsdpskip": "tests/system/test_pip_install.py::installed",
    "module load fsdpskip": "tests/integration/test_modules.py::test_two_rank_job_through_the_module",
    "cmake -S . -B build -DTorch_DIR=$(python -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')/Torch":
        "tools/pip-venv",  # the same configure, against the venv's torch, before its suite
    "cmake --build build -j && cmake --install build --prefix /opt/fsdpskip/0.1.0":
        "tests/integration/test_command.py::test_installed_tree_works_after_it_is_moved",
    "fsdpskip run --mode on -- torchrun --nproc_per_node 8 train.py":
        "tests/integration/test_command.py::test_two_rank_job_through_run_then_report",
    'srun fsdpskip run --mode on --report "$PWD/fsdpskip/%h-%r.json" -- python train.py':
        "tests/site/test_slurm.py::test_srun_runs_the_job_under_fsdpskip",
    "accelerate launch --no_python … fsdpskip run -- python train.py":
        "tests/integration/test_frameworks.py::test_fsdpskip_run_inside_a_two_process_accelerate_launch",
    "FSDPSKIP=on LD_PRELOAD=$VIRTUAL_ENV/lib/libfsdpskip.so torchrun --nproc_per_node 8 train.py":
        "tests/integration/test_distributed.py::test_rank1_skips_then_holds_rank0_values",
    "fsdpskip report fsdpskip/": "tests/integration/test_command.py::test_two_rank_job_through_run_then_report",
    "fsdpskip doctor --python python": "tests/integration/test_command.py::test_doctor_passes_this_torch_with_every_probe",
    "tools/demo": "tests/integration/test_documentation.py::test_the_demo_runs_as_the_readme_gives_it",
    "tools/test": ".ci/run",  # CI runs exactly this
}


def readme_commands():
    with open(README) as f:
        text = f.read()
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        for line in block.splitlines():
            command = re.sub(r"\s+#.*$", "", line).strip()
            if command:
                commands.append(command)
    return commands


def test_every_readme_command_is_exercised_by_a_named_test():
    commands = readme_commands()
    assert sorted(set(commands)) == sorted(README_COMMANDS), "map each README command to its test here"
    for test in set(README_COMMANDS.values()):
        path, _, name = test.partition("::")
        with open(os.path.join(SOURCE_DIR, path)) as f:
            source = f.read()
        assert not name or re.search(r"^def %s\(" % re.escape(name), source, re.M), test
    with open(os.path.join(SOURCE_DIR, ".ci", "run")) as f:
        assert f.read().rstrip().endswith("\ntools/test"), "CI runs the README's test command"


def test_the_demo_runs_as_the_readme_gives_it():
    """tools/demo as the README gives it, on a tiny model rather than the
    0.5B one: it builds (a no-op here), runs the 2-rank job with and without
    fsdpskip, and prints rank 1's figures side by side."""
    done = subprocess.run([os.path.join(SOURCE_DIR, "tools", "demo"), "--sizes", "tiny"], capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "| tiny | hf4 | none | 1 |" in done.stdout and "| tiny | hf4 | on | 1 |" in done.stdout, done.stdout
    assert "rank 1, tiny hf4: build time " in done.stdout, done.stdout
    summaries = [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("fsdpskip: local rank 1 ")]
    assert summaries and all(line.endswith("pending 0") for line in summaries), done.stdout + done.stderr
