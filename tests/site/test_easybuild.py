"""EasyBuild (from PyPI, under Lmod, inside the site root) builds fsdpskip
from the repository's easyconfig (env/easybuild) and a local source tarball,
and the module it generates gives a working `fsdpskip`: doctor passes for
the root's torch and a job on local rank 1 skips.

  FSDPSKIP_BUILD_DIR  unused here (EasyBuild builds from the sources)
"""
import fnmatch
import os
import re
import subprocess
import tarfile
import tomllib

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
with open(os.path.join(SOURCE, "CMakeLists.txt")) as cmake_lists:  # the version's one home
    VERSION = re.search(r"project\(fsdpskip VERSION ([0-9.]+)", cmake_lists.read()).group(1)
EASYCONFIG = os.path.join(SOURCE, "env", "easybuild", "fsdpskip-%s.eb" % VERSION)
EB = "/opt/easybuild/bin/eb"
LMOD_INIT = "/usr/share/lmod/lmod/init/bash"
SCENARIOS = os.path.join(SOURCE, "tests", "integration", "scenarios.py")


def released_files():
    """What a release tarball holds: the sdist's files, the tracked files less
    pyproject.toml's sdist.exclude (that list's one home)."""
    with open(os.path.join(SOURCE, "pyproject.toml"), "rb") as pyproject:
        excluded = tomllib.load(pyproject)["tool"]["scikit-build"]["sdist"]["exclude"]
    tracked = subprocess.run(["git", "-C", SOURCE, "ls-files", "-z"], capture_output=True, text=True, check=True).stdout
    def is_excluded(path):
        parts = path.split("/")
        folders = ["/".join(parts[:n]) + "/" for n in range(1, len(parts))]
        return any(fnmatch.fnmatch(folder, pattern) for pattern in excluded for folder in folders)
    return [path for path in tracked.split("\0") if path and not is_excluded(path)]


def source_tarball(directory):
    """fsdpskip-<version>.tar.gz where EasyBuild looks: <sourcepath>/f/fsdpskip/."""
    target = os.path.join(directory, "f", "fsdpskip")
    os.makedirs(target)
    path = os.path.join(target, "fsdpskip-%s.tar.gz" % VERSION)
    with tarfile.open(path, "w:gz") as tar:
        for name in released_files():
            tar.add(os.path.join(SOURCE, name), arcname="fsdpskip-%s/" % VERSION + name)
    return path


def bash(script, **variables):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LMOD", "MODULE", "__LMOD", "_ModuleTable"))}
    env.update(variables)
    return subprocess.run(["bash", "-c", "set -e\nsource %s\n%s" % (LMOD_INIT, script)], env=env,
                          capture_output=True, text=True, timeout=3600)


def test_easybuild_builds_a_module_whose_fsdpskip_works(tmp_path):
    with open(EASYCONFIG) as easyconfig:
        assert "\nversion = '%s'\n" % VERSION in easyconfig.read(), "the easyconfig's version is CMakeLists.txt's"
    sources, install = str(tmp_path / "sources"), str(tmp_path / "easybuild")
    source_tarball(sources)
    # eb runs with the first python on PATH that imports easybuild: the venv's.
    built = bash("PATH=/opt/easybuild/bin:$PATH %s %s --sourcepath=%s --installpath=%s --buildpath=%s --tmpdir=%s --modules-tool=Lmod "
                 "--module-syntax=Lua --allow-use-as-root-and-accept-consequences"
                 % (EB, EASYCONFIG, sources, install, tmp_path / "build", tmp_path / "tmp"))
    assert built.returncode == 0 and "COMPLETED: Installation ended successfully" in built.stdout, \
        built.stdout[-4000:] + built.stderr[-2000:]
    module = os.path.join(install, "modules", "all", "fsdpskip", VERSION + ".lua")
    assert os.path.exists(module), built.stdout[-2000:]

    used = bash("module use %s/modules/all\nmodule load fsdpskip/%s\ncommand -v fsdpskip\n"
                "fsdpskip doctor --python /usr/bin/python3\n"
                "LOCAL_RANK=1 fsdpskip run --mode on -- python3 %s hf_init_weights >/dev/null" % (install, VERSION, SCENARIOS))
    assert used.returncode == 0, used.stdout[-3000:] + used.stderr[-3000:]
    assert used.stdout.splitlines()[0] == os.path.join(install, "software", "fsdpskip", VERSION, "bin", "fsdpskip")
    assert "verdict: fsdpskip can work with this torch" in used.stdout, used.stdout
    assert "local rank 1 pid" in used.stderr and "pending 0" in used.stderr, used.stderr
    print(built.stdout[-1500:])
