"""Commands run as on a GPU node whose venv has PyPI's CUDA torch and
nothing else: no CUDA toolkit and, for a pip install, none of Debian's -dev
packages the project could use (nlohmann-json3-dev). What they would find is
hidden under empty tmpfs mounts in a mount namespace of the command's own."""
import os
import subprocess

CUDA = ["/usr/local/cuda"]
DEV_PACKAGES = ["/usr/include/nlohmann", "/usr/share/cmake/nlohmann_json"]


def run(argv, env, hide=CUDA, **kwargs):
    mounts = "".join("mount -t tmpfs tmpfs %s && " % path for path in hide if os.path.isdir(path))
    env = dict(env, PATH=":".join(p for p in env["PATH"].split(":") if "cuda" not in p), CUDA_HOME="",
               CUDA_PATH="", CUDACXX="")
    return subprocess.run(["unshare", "-m", "sh", "-c", mounts + 'exec "$@"', "sh"] + list(argv), env=env,
                          capture_output=True, text=True, **kwargs)
