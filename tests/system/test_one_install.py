"""One install serves every torch on the machine (docs/site-administration.md: "One install,
every torch"): `fsdpskip plugin build` puts a plugin per libtorch build-id
where the preload looks, and a job of each torch skips with its own plugin.

Three torches: Debian 12's 1.13.1 (plugin into the install, --system), PyPI's
CUDA build in the pip venv (into the user's cache, by the very command the
preload's warning names, with no CUDA toolkit to be found) and a Debian root's 2.x (built and run inside the root, from
the same install, seen there through the checkout's mount at /src).

Run by tools/test after the roots and the venv exist:
  FSDPSKIP_BUILD_DIR  the host's build tree (inside the checkout)
  FSDPSKIP_PIP_PYTHON the pip venv's python (tools/pip-venv ensure)
  FSDPSKIP_TEST_ROOT  the Debian root (tools/torch-roots), default trixie
"""
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(SOURCE, "tools", "workloads"))
from policy_variables import without_policy  # noqa: E402

import gpu_node  # noqa: E402

BUILD = os.path.realpath(os.environ["FSDPSKIP_BUILD_DIR"])
PIP_PYTHON = os.environ["FSDPSKIP_PIP_PYTHON"]
ROOT = os.environ.get("FSDPSKIP_TEST_ROOT", "trixie")  # not FSDPSKIP_ROOT, the modulefile's prefix
DEBIAN_PYTHON = "/usr/bin/python3"
PREFIX = os.path.join(BUILD, "one-install")
CACHE = os.path.join(BUILD, "one-install-cache")  # the user's cache: XDG_CACHE_HOME
SCENARIO = ["tests/integration/scenarios.py", "hf_init_weights"]  # relative to the checkout


def inside(path):
    """`path` as the root sees it: the checkout is mounted at /src."""
    assert path.startswith(SOURCE + "/"), "the build tree must be inside the checkout"
    return "/src" + path[len(SOURCE):]


def fsdpskip_lines(text):
    return [line for line in text.splitlines() if line.startswith("fsdpskip:")]


def host(argv, **variables):
    env = without_policy(os.environ)
    env.update(XDG_CACHE_HOME=CACHE, **variables)
    return subprocess.run(argv, env=env, cwd=SOURCE, capture_output=True, text=True, timeout=1800)


def in_root(argv, **variables):
    settings = ["XDG_CACHE_HOME=" + inside(CACHE)] + ["%s=%s" % item for item in variables.items()]
    return subprocess.run([os.path.join(SOURCE, "tools", "torch-roots"), "run", ROOT, "env", "--chdir=/src"] +
                          settings + argv, capture_output=True, text=True, timeout=1800)


def job(python, run=host, prefix=PREFIX):
    """The scenario on local rank 1 under the install's preload."""
    return run([python] + SCENARIO, LD_PRELOAD=prefix + "/lib/libfsdpskip.so", FSDPSKIP="on", LOCAL_RANK="1",
               FSDPSKIP_LOG="debug")


def loaded_and_skipped(done):
    """The plugin a job loaded, after checking that it skipped and left nothing pending."""
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = [line for line in fsdpskip_lines(done.stderr) if "loading the plugin" in line]
    summary = [line for line in fsdpskip_lines(done.stderr) if re.search(r"local rank \d+ pid \d+: skipped", line)]
    assert len(loaded) == 1 and len(summary) == 1, done.stderr[-3000:]
    assert re.search(r"skipped [1-9]\d* calls", summary[0]) and "pending 0" in summary[0], summary[0]
    return loaded[0].split("loading the plugin ", 1)[1]


def build_id_of(python, run=host):
    done = run([python, "-c", "import torch, os; print([l.split()[-1] for l in open('/proc/self/maps') "
                              "if os.path.basename(l.split()[-1]).startswith('libtorch_cpu.so')][0])"])
    assert done.returncode == 0, done.stderr
    notes = run(["readelf", "-n", done.stdout.strip()])
    return re.search(r"Build ID: ([0-9a-f]+)", notes.stdout).group(1)


@pytest.fixture(scope="module", autouse=True)
def install():
    """The build tree installed, less the plugin built with it: every plugin
    here comes from `fsdpskip plugin build`."""
    for path in (PREFIX, CACHE):
        shutil.rmtree(path, ignore_errors=True)
    done = subprocess.run(["cmake", "--install", BUILD, "--prefix", PREFIX], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    os.remove(os.path.join(PREFIX, "lib", "libfsdpskip_torch.so"))
    yield
    for path in (PREFIX, CACHE):
        shutil.rmtree(path, ignore_errors=True)


# Each plugin is built by the test's own fixture, once, whichever test asks
# first: each test runs alone as well as in the file.
@pytest.fixture(scope="module")
def pip_plugin():
    """The pip venv's plugin, built by exactly the command the preload's
    warning names (into the user's cache, with no CUDA toolkit to be found);
    the job before it and the build, for the test that checks them."""
    plain = host([PIP_PYTHON] + SCENARIO)
    before = job(PIP_PYTHON)
    warnings = [line for line in fsdpskip_lines(before.stderr) if "warning:" in line]
    command = warnings[0].split("build one with: ", 1)[1].split("; inactive")[0].split() if len(warnings) == 1 else []
    env = without_policy(os.environ)
    env.update(XDG_CACHE_HOME=CACHE)
    built = gpu_node.run(command, env, timeout=1800) if command else None
    expected = os.path.join(CACHE, "fsdpskip", "plugins", build_id_of(PIP_PYTHON), "libfsdpskip_torch.so")
    return dict(plain=plain, before=before, warnings=warnings, command=command, built=built, expected=expected)


@pytest.fixture(scope="module")
def debian_plugin():
    built = host([PREFIX + "/bin/fsdpskip", "plugin", "build", "--python", DEBIAN_PYTHON, "--system"])
    assert built.returncode == 0, built.stdout + built.stderr
    return os.path.join(PREFIX, "lib", "fsdpskip", "plugins", build_id_of(DEBIAN_PYTHON), "libfsdpskip_torch.so")


@pytest.fixture(scope="module")
def root_plugin():
    built = in_root([inside(PREFIX) + "/bin/fsdpskip", "plugin", "build", "--python", "python3"])
    assert built.returncode == 0, built.stdout + built.stderr
    return os.path.join(inside(CACHE), "fsdpskip", "plugins", build_id_of("python3", in_root), "libfsdpskip_torch.so")


def test_a_torch_without_a_plugin_is_told_the_command_that_builds_it(pip_plugin):
    before, warnings, command = pip_plugin["before"], pip_plugin["warnings"], pip_plugin["command"]
    assert before.returncode == 0 and before.stdout == pip_plugin["plain"].stdout, \
        "without a plugin the job runs untouched"
    assert len(warnings) == 1 and "no plugin for this process's torch" in warnings[0], before.stderr
    assert command[:3] == [PREFIX + "/bin/fsdpskip", "plugin", "build"], command
    built = pip_plugin["built"]
    assert built.returncode == 0, built.stdout + built.stderr
    assert built.stdout.strip().endswith(pip_plugin["expected"]), built.stdout
    assert loaded_and_skipped(job(PIP_PYTHON)) == pip_plugin["expected"]


def test_debians_torch_gets_a_plugin_in_the_install(debian_plugin):
    assert loaded_and_skipped(job(DEBIAN_PYTHON)) == debian_plugin


def test_a_root_torch_gets_a_plugin_from_the_same_install(root_plugin):
    assert loaded_and_skipped(job("python3", in_root, inside(PREFIX))) == root_plugin


def test_plugin_list_shows_one_plugin_per_torch(pip_plugin, debian_plugin, root_plugin):
    done = host([PREFIX + "/bin/fsdpskip", "plugin", "list", "--json"])
    assert done.returncode == 0, done.stderr
    plugins = json.loads(done.stdout)["plugins"]
    versions = sorted(p["torch"].split("+")[0] for p in plugins)
    assert len(plugins) == 3 and all(p["loadable"] for p in plugins), plugins
    assert len(set(p["build_id"] for p in plugins)) == 3 and versions[0].startswith("1.13"), versions


def test_plugin_list_marks_a_plugin_whose_libtorch_changed_as_stale(tmp_path, debian_plugin):
    """A copy of Debian's plugin claiming the libtorch file at the same path
    had another build-id: what an in-place torch upgrade leaves behind."""
    debian = next(p for p in json.loads(host([PREFIX + "/bin/fsdpskip", "plugin", "list", "--json"]).stdout)["plugins"]
                  if p["torch"].startswith("1.13"))
    old = "00000000000000000000000000000000deadbeef"
    stale = os.path.join(CACHE, "fsdpskip", "plugins", old)
    os.makedirs(stale)
    shutil.copy(debian["path"], stale)
    identity = str(tmp_path / "identity")
    subprocess.run(["objcopy", "--dump-section", ".fsdpskip_torch_id=" + identity, debian["path"], str(tmp_path / "x")],
                   check=True)
    text = open(identity).read().rstrip("\0").replace(debian["build_id"], old)
    open(identity, "w").write(text)
    subprocess.run(["objcopy", "--update-section", ".fsdpskip_torch_id=" + identity,
                    os.path.join(stale, "libfsdpskip_torch.so")], check=True)
    try:
        plugins = json.loads(host([PREFIX + "/bin/fsdpskip", "plugin", "list", "--json"]).stdout)["plugins"]
    finally:
        shutil.rmtree(stale)
    row = next(p for p in plugins if p["build_id"] == old)
    assert row["status"].startswith("stale: ") and "now build-id " + debian["build_id"] in row["status"], row


def test_doctor_names_the_plugin_it_would_load(pip_plugin):
    done = host([PREFIX + "/bin/fsdpskip", "doctor", "--json", "--python", PIP_PYTHON])
    result = json.loads(done.stdout)
    plugin = next(c for c in result["checks"] if c["check"] == "plugin")
    assert done.returncode == 0 and result["verdict"] == "ok", done.stdout
    assert plugin["detail"].startswith(os.path.join(CACHE, "fsdpskip", "plugins")) and "the user's cache" in \
        plugin["detail"], plugin


def test_a_plugin_directory_others_can_write_is_passed_over(pip_plugin):
    directory = os.path.join(CACHE, "fsdpskip", "plugins", build_id_of(PIP_PYTHON))
    os.chmod(directory, 0o777)
    try:
        done = job(PIP_PYTHON)
    finally:
        os.chmod(directory, 0o755)
    assert done.returncode == 0
    warnings = [line for line in fsdpskip_lines(done.stderr) if "warning:" in line]
    assert len(warnings) == 1 and "directory %s is writable by others" % directory in warnings[0], \
        done.stderr
    assert not [line for line in fsdpskip_lines(done.stderr) if "loading the plugin" in line]
