"""tools/gpu/check.py on a machine without a GPU: it says so and fails,
rather than passing with nothing checked (tools/gpu-check runs it on a GPU
machine)."""
import json
import os

import pytest
import torch

from harness import PRELOAD, PYTHON, SOURCE_DIR, run

CHECK = os.path.join(SOURCE_DIR, "tools", "gpu", "check.py")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: tools/gpu-check checks it")
def test_no_gpu_is_a_failure_that_says_so(tmp_path):
    done = run([PYTHON, CHECK, "--preload", PRELOAD, "--out", str(tmp_path)], preload=False)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.startswith("gpu-check: no GPU:"), done.stdout
    with open(tmp_path / "gpu-check.json") as f:
        result = json.load(f)
    assert result["verdict"] == "no GPU" and result["steps"] == [] and result["torch"] == torch.__version__
