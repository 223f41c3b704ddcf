"""A transformers release beside the pip venv, for the flows whose outcome
depends on it (tools/frameworks/run's from_pretrained cells, the CI's
reward-model test): `pip install --target` with that release's own
dependencies and no torch (transformers does not depend on it), made once
under $FSDPSKIP_VENVS and reused."""
import os
import subprocess

import launch

VENVS = os.environ.get("FSDPSKIP_VENVS", "/var/cache/fsdpskip-venvs")


def transformers_path(version):
    """The directory holding transformers==version, for PYTHONPATH."""
    target = os.path.join(VENVS, "transformers-" + version)
    stamp = os.path.join(target, ".fsdpskip-transformers")
    if not os.path.exists(stamp):
        subprocess.run(["rm", "-rf", target], check=True)
        subprocess.run([launch.PYTHON, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-cache-dir",
                        "--target", target, "transformers==" + version], check=True)
        open(stamp, "w").close()
    return target
