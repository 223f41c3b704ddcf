"""tools/gpu/check.py on a machine without a GPU: it says so and fails,
rather than passing with nothing checked (tools/gpu-check runs it on a GPU
machine)."""
import json
import os

import pytest
import torch

from harness import PRELOAD, PYTHON, SOURCE_DIR, run

pytestmark = [pytest.mark.every_torch, pytest.mark.second_build]

CHECK = os.path.join(SOURCE_DIR, "tools", "gpu", "check.py")


def test_a_skipped_step_is_never_a_pass():
    """A step whose framework is not installed leaves the verdict
    incomplete (exit 1); only a step the machine cannot run (n/a: a second
    GPU) is left out of a pass."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("gpu_check", CHECK)
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    assert check.verdict_of(["ok", "ok", "n/a"]) == "pass"
    assert check.verdict_of(["ok", "skipped", "n/a", "skipped"]) == "incomplete (2 steps skipped)"
    assert check.verdict_of(["ok", "skipped", "FAIL"]) == "fail"
    assert check.Skipped("one GPU").machine_cannot is False


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: tools/gpu-check checks it")
def test_no_gpu_is_a_failure_that_says_so(tmp_path):
    done = run([PYTHON, CHECK, "--preload", PRELOAD, "--out", str(tmp_path)], preload=False)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.startswith("gpu-check: no GPU:"), done.stdout
    with open(tmp_path / "gpu-check.json") as f:
        result = json.load(f)
    assert result["verdict"] == "no GPU" and result["steps"] == [] and result["torch"] == torch.__version__


def test_a_python_without_torch_is_one_line(tmp_path):
    """tools/gpu-check --python with a Python that cannot import torch: one
    line that says so, no traceback, no build."""
    python = tmp_path / "python-without-torch"
    python.write_text("#!/bin/sh\nexec /usr/bin/python3 -S \"$@\"\n")  # -S: no site directories, so no torch
    python.chmod(0o755)
    done = run([os.path.join(SOURCE_DIR, "tools", "gpu-check"), "--python", str(python), "--out", str(tmp_path / "out")],
               preload=False)
    assert done.returncode == 1 and done.stdout == "", done.stdout + done.stderr
    assert done.stderr.splitlines() == ["gpu-check: %s cannot import torch: name a Python with PyPI's CUDA torch "
                                        "(--python PY)" % python], done.stderr
    assert not (tmp_path / "out").exists()
