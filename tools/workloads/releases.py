"""Packages beside the pip venv, each in a `pip install --target` directory
of its own under $FSDPSKIP_VENVS, made once and made again when what it
holds changes: a transformers release for the flows whose outcome depends
on it (tools/frameworks/run's checkpoint cells, the CI's reward-model
test), and the full suite's heavier frameworks (tools/frameworks/run)."""
import hashlib
import os
import subprocess

import launch

VENVS = os.environ.get("FSDPSKIP_VENVS", "/var/cache/fsdpskip-venvs")


def target_directory(name, pip_arguments, contents):
    """$FSDPSKIP_VENVS/name holding `pip install --target` of pip_arguments;
    `contents` says what it holds (its stamp): another makes it again."""
    target = os.path.join(VENVS, name)
    stamp = os.path.join(target, ".fsdpskip-target")
    if not os.path.exists(stamp) or open(stamp).read() != contents:
        subprocess.run(["rm", "-rf", target], check=True)
        subprocess.run([launch.PYTHON, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-cache-dir",
                        "--target", target] + pip_arguments, check=True)
        with open(stamp, "w") as f:
            f.write(contents)
    return target


def transformers_path(version):
    """transformers==version with its own dependencies and no torch
    (transformers does not depend on it), for PYTHONPATH."""
    return target_directory("transformers-" + version, ["transformers==" + version], version)


def requirements_path(name, requirements):
    """A requirements file installed as listed, no dependencies resolved (the
    list is complete), for PYTHONPATH."""
    with open(requirements, "rb") as f:
        contents = hashlib.sha256(f.read()).hexdigest()
    return target_directory(name, ["--no-deps", "-r", requirements], contents)
