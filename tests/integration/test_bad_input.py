"""Bad input never crashes or silently misbehaves: one clear line on stderr,
and the user's program runs untouched."""
import glob
import json
import os
import shutil
import stat
import subprocess

import pytest

from harness import (PLUGIN, PYTHON, SCENARIOS, baseline, environment, foreign_plugin, fsdpskip_lines,
                     other_architecture_copy, require, run, said_by_fsdpskip, torch_library)


def plain_output():
    return baseline([PYTHON, SCENARIOS, "hf_init_weights"]).stdout


@pytest.mark.parametrize("variables,needle", [
    ({"FSDPSKIP": "maybe", "LOCAL_RANK": "1"}, 'FSDPSKIP="maybe" is not valid (accepted: auto, on, off, audit)'),
    ({"FSDPSKIP": "on", "LOCAL_RANK": "x1"}, 'LOCAL_RANK="x1" is not valid (accepted: a non-negative integer)'),
    ({"FSDPSKIP": "on", "LOCAL_RANK": "1", "FSDPSKIP_LOG": "loud"}, 'FSDPSKIP_LOG="loud" is not valid'),
    ({"LOCAL_RANK": "1", "ACCELERATE_USE_FSDP": "perhaps", "FSDP_CPU_RAM_EFFICIENT_LOADING": "1"},
     'ACCELERATE_USE_FSDP="perhaps" is not valid'),
])
def test_malformed_variable_is_one_line_and_inert(variables, needle):
    done = run([PYTHON, SCENARIOS, "hf_init_weights"], **variables)
    assert done.returncode == 0
    assert done.stdout == plain_output(), "the process must stay inert"
    lines = fsdpskip_lines(done.stderr)
    assert len(lines) == 1 and needle in lines[0], done.stderr


def test_missing_plugin_is_one_line_and_inert(tmp_path):
    done = run([PYTHON, SCENARIOS, "hf_init_weights"], FSDPSKIP="on", LOCAL_RANK="1",
               FSDPSKIP_PLUGIN=str(tmp_path / "nowhere.so"))
    assert done.returncode == 0 and done.stdout == plain_output()
    lines = fsdpskip_lines(done.stderr)
    assert len(lines) == 1 and "FSDPSKIP_PLUGIN: %s does not exist" % (tmp_path / "nowhere.so") in lines[0], done.stderr


@pytest.mark.every_torch
@pytest.mark.second_build
def test_plugin_built_for_another_torch_is_refused_before_loading(tmp_path):
    """A plugin whose recorded libtorch differs must never be dlopened: it
    would map a second libtorch into the process."""
    foreign = foreign_plugin(tmp_path)
    done = run([PYTHON, SCENARIOS, "hf_init_weights"], FSDPSKIP="on", LOCAL_RANK="1", FSDPSKIP_PLUGIN=str(foreign))
    assert done.returncode == 0 and done.stdout == plain_output()
    lines = fsdpskip_lines(done.stderr)
    assert len(lines) == 1, done.stderr
    assert "built for torch 9.9.9 (libtorch_cpu build-id 00000000000000000000000000000000deadbeef)" in lines[0]
    assert "libtorch_cpu.so" in lines[0] and "inactive" in lines[0]


@pytest.mark.parametrize("contents", ["text", "empty", "elf header only", "truncated"])
def test_file_that_is_not_a_plugin_is_refused(tmp_path, contents):
    with open(PLUGIN, "rb") as f:
        plugin = f.read()
    bogus = tmp_path / "libfsdpskip_torch.so"
    bogus.write_bytes({"text": b"not an ELF file", "empty": b"", "elf header only": plugin[:64],
                       "truncated": plugin[:len(plugin) // 2]}[contents])
    done = run([PYTHON, SCENARIOS, "hf_init_weights"], FSDPSKIP="on", LOCAL_RANK="1", FSDPSKIP_PLUGIN=str(bogus))
    assert done.returncode == 0 and done.stdout == plain_output()
    assert len(fsdpskip_lines(done.stderr)) == 1 and "is not a fsdpskip torch plugin" in done.stderr


@pytest.mark.emulated
def test_plugin_of_another_architecture_is_refused_before_loading(tmp_path):
    """An aarch64 plugin on x86-64 (a shared install, a copied cache), or
    the reverse: one line naming both architectures, never dlopen'd."""
    plugin, other, here = other_architecture_copy(PLUGIN, tmp_path / "libfsdpskip_torch.so")
    done = run([PYTHON, SCENARIOS, "hf_init_weights"], FSDPSKIP="on", LOCAL_RANK="1", FSDPSKIP_PLUGIN=plugin)
    assert done.returncode == 0 and done.stdout == plain_output()
    lines = fsdpskip_lines(done.stderr)
    assert len(lines) == 1 and "%s is built for %s; this fsdpskip runs on %s" % (plugin, other, here) in lines[0], lines


@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
def test_plugin_path_that_is_no_file_is_one_line_and_never_waited_on(tmp_path, kind):
    """Opening a FIFO for reading blocks until a writer comes: the preload
    must refuse it without opening it that way (it hung before)."""
    path = {"fifo": str(tmp_path / "fifo"), "directory": str(tmp_path), "device": "/dev/zero"}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    done = run([PYTHON, SCENARIOS, "hf_init_weights"], FSDPSKIP="on", LOCAL_RANK="1", FSDPSKIP_PLUGIN=path)
    assert done.returncode == 0 and done.stdout == plain_output()
    lines = fsdpskip_lines(done.stderr)
    assert len(lines) == 1 and "%s is not a regular file" % path in lines[0], done.stderr


def test_plugin_that_other_users_can_write_is_never_loaded(tmp_path):
    plugin = tmp_path / "libfsdpskip_torch.so"
    shutil.copy(PLUGIN, str(plugin))
    for path, mode, needle in [(plugin, 0o666, "%s is writable by others" % plugin),
                               (tmp_path, 0o777, "directory %s is writable by others" % tmp_path)]:
        os.chmod(str(plugin), 0o644)
        os.chmod(str(tmp_path), 0o755)
        os.chmod(str(path), mode)
        done = run([PYTHON, SCENARIOS, "hf_init_weights"], FSDPSKIP="on", LOCAL_RANK="1", FSDPSKIP_PLUGIN=str(plugin))
        assert done.returncode == 0 and done.stdout == plain_output()
        lines = fsdpskip_lines(done.stderr)
        assert len(lines) == 1 and needle in lines[0] and "inactive" in lines[0], done.stderr
    os.chmod(str(tmp_path), 0o755)


def test_unwritable_report_path_is_one_line_naming_the_component_and_exit_status_kept(tmp_path):
    """A directory on the report's path that cannot be made (here a regular
    file stands where it should be; the tests run as root, which no mode
    stops) is named in one line, and nothing is made below it."""
    (tmp_path / "file").write_text("not a directory")
    done = run([PYTHON, SCENARIOS, "hf_init_weights"], FSDPSKIP="on", LOCAL_RANK="1",
               FSDPSKIP_REPORT=str(tmp_path / "file" / "reports" / "report-%p.json"))
    assert done.returncode == 0
    lines = [l for l in fsdpskip_lines(done.stderr) if "FSDPSKIP_REPORT" in l]
    assert lines == ["fsdpskip: error: FSDPSKIP_REPORT: cannot create directory %s: Not a directory; no report "
                     "written" % (tmp_path / "file")], done.stderr
    assert sorted(os.listdir(str(tmp_path))) == ["file"]


def test_missing_report_directories_are_made_by_every_rank_at_once(tmp_path):
    """A report template whose directories do not exist yet, as a user first
    writes one (`--report "$PWD/rep/%h-%r.json"`): four ranks started
    together make them (one may find a component another just made), each
    with mode 0777 less the umask, and every rank's report is there."""
    template = str(tmp_path / "reports" / "job" / "report-%p.json")
    command = "umask 027; exec %s %s hf_init_weights" % (PYTHON, SCENARIOS)
    ranks = [subprocess.Popen(["sh", "-c", command], env=environment(True, FSDPSKIP="on", LOCAL_RANK="1",
                                                                      FSDPSKIP_REPORT=template),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    for rank in ranks:
        _, err = rank.communicate(timeout=300)
        assert rank.returncode == 0 and "FSDPSKIP_REPORT" not in err, err
    for directory in (tmp_path / "reports", tmp_path / "reports" / "job"):
        assert stat.S_IMODE(os.stat(str(directory)).st_mode) == 0o750, directory
    reports = sorted(os.listdir(str(tmp_path / "reports" / "job")))
    assert len(reports) == 4 and all(name.startswith("report-") and name.endswith(".json") for name in reports)


@pytest.mark.parametrize("template, named", [("report-%x.json", "unknown sequence %x"),
                                             ("report-%", "a % at the end")])
def test_unknown_report_path_sequence_is_one_line_and_nothing_written(tmp_path, template, named):
    done = run([PYTHON, SCENARIOS, "hf_init_weights"], FSDPSKIP="on", LOCAL_RANK="1",
               FSDPSKIP_REPORT=str(tmp_path / template))
    assert done.returncode == 0
    lines = [l for l in fsdpskip_lines(done.stderr) if "FSDPSKIP_REPORT" in l]
    assert len(lines) == 1 and named in lines[0] and "no report written" in lines[0], lines
    assert os.listdir(str(tmp_path)) == [], "no file under a literal or partial name"


def test_report_path_over_path_max_is_one_line_and_nothing_written(tmp_path):
    long_path = str(tmp_path) + ("/" + "r" * 250) * 20 + "/report.json"  # about 5 KiB: over PATH_MAX
    done = run([PYTHON, SCENARIOS, "hf_init_weights"], FSDPSKIP="on", LOCAL_RANK="1", FSDPSKIP_REPORT=long_path)
    assert done.returncode == 0
    lines = [l for l in fsdpskip_lines(done.stderr) if "FSDPSKIP_REPORT" in l]
    assert len(lines) == 1 and "File name too long" in lines[0] and "no report written" in lines[0], lines
    assert os.listdir(str(tmp_path)) == []


def test_report_directory_that_is_a_symlink_is_followed(tmp_path):
    """Only the report's own name is never followed (a planted link, below);
    a directory on the way may be a link, as /scratch often is."""
    (tmp_path / "real").mkdir()
    os.symlink(str(tmp_path / "real"), str(tmp_path / "link"))
    done = run([PYTHON, SCENARIOS, "hf_init_weights"], FSDPSKIP="on", LOCAL_RANK="1",
               FSDPSKIP_REPORT=str(tmp_path / "link" / "report.json"))
    assert done.returncode == 0 and "FSDPSKIP_REPORT" not in done.stderr, done.stderr
    assert json.loads((tmp_path / "real" / "report.json").read_text())["schema"] == "fsdpskip-report"


def test_report_is_atomic_and_never_written_through_a_planted_symlink(tmp_path):
    target = tmp_path / "victim"
    target.write_text("precious")
    report = tmp_path / "report.json"
    # Someone plants links where the report and its temporary file will go.
    os.symlink(str(target), str(report))
    done = run([PYTHON, "-c", "import os, runpy, sys; sys.argv=['s', 'hf_init_weights']; "
                "os.symlink(%r, %r + '.partial.' + str(os.getpid())); runpy.run_path(%r, run_name='__main__')"
                % (str(target), str(report), SCENARIOS)],
               FSDPSKIP="on", LOCAL_RANK="1", FSDPSKIP_REPORT=str(report))
    assert done.returncode == 0
    assert target.read_text() == "precious", "a report was written through a symlink"
    assert "cannot create" in done.stderr and "no report written" in done.stderr
    # Without the planted temporary link, the report replaces the link itself.
    os.unlink(str(report) + ".partial.%d" % int(done.stderr.split(".partial.")[1].split(":")[0]))
    done = run([PYTHON, SCENARIOS, "hf_init_weights"], FSDPSKIP="on", LOCAL_RANK="1", FSDPSKIP_REPORT=str(report))
    assert target.read_text() == "precious"
    assert not os.path.islink(str(report)) and json.loads(report.read_text())["schema"] == "fsdpskip-report"
    assert [p for p in os.listdir(str(tmp_path)) if ".partial." in p] == []


TWO_TORCHES = """
import ctypes, sys
if sys.argv[1] == "other first":
    ctypes.CDLL(sys.argv[2], mode=ctypes.RTLD_LOCAL)
import torch
if sys.argv[1] == "this first":
    ctypes.CDLL(sys.argv[2], mode=ctypes.RTLD_LOCAL)
weight = torch.nn.Linear(64, 64).weight
print(float(weight.abs().sum()) > 0)
"""


def another_libtorch():
    """A libtorch_cpu that is not the suite's own: Debian's, or the pip
    venv's (tools/pip-venv) when the suite runs Debian's."""
    mine = torch_library()
    venvs = os.environ.get("FSDPSKIP_VENVS", "/var/cache/fsdpskip-venvs")
    for pattern in ["/usr/lib/*-linux-gnu/libtorch_cpu.so.*", venvs + "/pip/lib/python3*/site-packages/torch/lib/libtorch_cpu.so"]:
        for path in sorted(glob.glob(pattern)):
            if os.path.realpath(path) != os.path.realpath(mine):
                return path
    return None


@pytest.mark.parametrize("order", ["this first", "other first"])
def test_two_torches_in_one_process_fare_as_without_the_preload(order):
    """torch itself cannot share a process with a second libtorch (both
    orders crash or abort in its start-up, preload or not); the preload must
    not change how (a hang, another status, a line of its own)."""
    other = another_libtorch()
    require("pip-venv", other is not None, "no second torch on this machine (tools/pip-venv makes one)")
    plain = run([PYTHON, "-c", TWO_TORCHES, order, other], preload=False, FSDPSKIP="on", LOCAL_RANK="1")
    preloaded = run([PYTHON, "-c", TWO_TORCHES, order, other], FSDPSKIP="on", LOCAL_RANK="1")
    assert plain.returncode != 0, "torch held two libtorch builds: this test's premise is gone"
    # Killed by a signal (which one is torch's affair) or exiting, the same way, with the same output.
    assert (preloaded.returncode < 0, preloaded.stdout) == (plain.returncode < 0, plain.stdout), preloaded.stderr
    assert said_by_fsdpskip(fsdpskip_lines(preloaded.stderr)) == [], preloaded.stderr
