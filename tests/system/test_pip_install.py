"""pip install into the training venv (docs/install.md: "In a training venv with PyPI's torch"):
`pip install --no-build-isolation` of this source tree in the pip venv, with
no CUDA toolkit and none of Debian's -dev packages to be found, gives a
`fsdpskip` on the venv's PATH whose doctor passes and whose 2-rank job skips
and syncs; a Python without torch gets one clear error. The venv is left as
it was (fsdpskip uninstalled; pyproject.toml's build requirements stay).

  FSDPSKIP_PIP_PYTHON the pip venv's python (tools/pip-venv ensure)
"""
import json
import os
import re
import subprocess
import sys
import tomllib

import pytest

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PIP_PYTHON = os.environ["FSDPSKIP_PIP_PYTHON"]
os.environ.setdefault("FSDPSKIP_PYTHON", PIP_PYTHON)  # launch.py's ranks run the venv's python
sys.path.insert(0, os.path.join(SOURCE, "tools", "workloads"))
import launch  # noqa: E402
from policy_variables import without_policy  # noqa: E402

import gpu_node  # noqa: E402

VENV_BIN = os.path.dirname(PIP_PYTHON)
with open(os.path.join(SOURCE, "pyproject.toml"), "rb") as f:
    BUILD_REQUIRES = tomllib.load(f)["build-system"]["requires"]


def pip(python, *args, hide=gpu_node.CUDA):
    env = without_policy(os.environ)
    env["PATH"] = os.path.dirname(python) + ":" + env["PATH"]  # as in an activated venv
    return gpu_node.run([python, "-m", "pip", "--disable-pip-version-check"] + list(args), env, hide=hide,
                        timeout=1800)


@pytest.fixture(scope="module")
def installed():
    done = pip(PIP_PYTHON, "install", "-q", *BUILD_REQUIRES)
    assert done.returncode == 0, done.stderr
    done = pip(PIP_PYTHON, "install", "--no-build-isolation", "--no-deps", SOURCE,
               hide=gpu_node.CUDA + gpu_node.DEV_PACKAGES)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    yield os.path.join(VENV_BIN, "fsdpskip")
    done = pip(PIP_PYTHON, "uninstall", "-y", "fsdpskip")
    assert done.returncode == 0 and not os.path.exists(os.path.join(VENV_BIN, "fsdpskip")), done.stderr


def venv_environment():
    env = without_policy(os.environ)
    env["PATH"] = VENV_BIN + ":" + env["PATH"]
    return env


def test_fsdpskip_is_on_the_venvs_path_and_its_doctor_passes(installed):
    env = venv_environment()
    found = subprocess.run(["sh", "-c", "command -v fsdpskip"], env=env, capture_output=True, text=True)
    assert found.stdout.strip() == installed
    # The package's version is CMakeLists.txt's project(VERSION) (pyproject.toml reads it there).
    with open(os.path.join(SOURCE, "CMakeLists.txt")) as cmake_lists:
        version = re.search(r"project\(fsdpskip VERSION ([0-9.]+)", cmake_lists.read()).group(1)
    shown = pip(PIP_PYTHON, "show", "fsdpskip")
    assert "\nVersion: %s\n" % version in shown.stdout, shown.stdout
    done = subprocess.run(["fsdpskip", "doctor", "--json", "--python", PIP_PYTHON], env=env, capture_output=True,
                          text=True, timeout=600)
    result = json.loads(done.stdout)
    plugin = next(c for c in result["checks"] if c["check"] == "plugin")
    assert done.returncode == 0 and result["verdict"] == "ok", done.stdout
    assert plugin["detail"].startswith(os.path.join(os.path.dirname(VENV_BIN), "lib", "libfsdpskip_torch.so"))
    # The plugin was built with the C++ ABI torch itself says it has (PyPI's
    # x86-64 wheels up to 2.6: the pre-cxx11 one).
    cxx11 = subprocess.run([PIP_PYTHON, "-c", "import torch; print(torch.compiled_with_cxx11_abi())"],
                           capture_output=True, text=True, check=True).stdout.strip() == "True"
    abi = next(c for c in result["checks"] if c["check"] == "C++ ABI")
    assert ("_GLIBCXX_USE_CXX11_ABI=%d" % cxx11) in abi["detail"], abi


def test_a_two_rank_job_through_fsdpskip_run_skips_and_syncs(installed, tmp_path):
    out, reports = tmp_path / "out", tmp_path / "reports"
    out.mkdir()
    reports.mkdir()
    done = launch.run([os.path.join(SOURCE, "tools", "workloads", "load_model.py"), "--size", "tiny", "--sync",
                       "broadcast", "--verify", "--out", str(out)], venv_environment(), nproc=2, timeout=600,
                      prefix=["fsdpskip", "run", "--mode", "on", "--report", str(reports / "%r.json"), "--"])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ranks = [json.loads((out / ("rank%d.json" % r)).read_text()) for r in (0, 1)]
    assert all(r["equal_to_rank0"] for r in ranks), ranks
    verdict = subprocess.run(["fsdpskip", "report", str(reports)], env=venv_environment(), capture_output=True,
                             text=True)
    assert verdict.returncode == 0 and "verdict: pass" in verdict.stdout, verdict.stdout + verdict.stderr
    assert json.loads((reports / "1.json").read_text())["storages_skipped"] > 0


def test_a_python_without_torch_gets_one_clear_error(tmp_path):
    venv = tmp_path / "no-torch"
    subprocess.run(["/usr/bin/python3", "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    done = pip(python, "install", "-q", *BUILD_REQUIRES)
    assert done.returncode == 0, done.stderr
    done = pip(python, "install", "--no-build-isolation", "--no-deps", SOURCE)
    assert done.returncode != 0
    assert "fsdpskip: torch is not installed in the Python environment that builds it" in done.stdout + done.stderr
