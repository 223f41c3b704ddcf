"""The modulefiles under the real Lmod and the real Environment Modules
(Debian's lmod and environment-modules, which conflict: tools/test runs this
with the host's module system, then with Lmod inside the site root, never
swapping the host's, and names the one it expects in
FSDPSKIP_REQUIRED so a missing one fails instead of skipping).

Each test installs the tree with `cmake --install`, then drives a bash
session: module use, load, the 2-rank job through `fsdpskip run`, unload."""
import glob
import json
import os
import re
import shutil
import subprocess

import pytest

from harness import BUILD_DIR, LIBM, LOAD_MODEL, PYTHON, SCENARIOS, SOURCE_DIR, environment, require, system_library

LAUNCH = os.path.join(SOURCE_DIR, "tools", "workloads", "launch.py")
with open(os.path.join(SOURCE_DIR, "CMakeLists.txt")) as cmake_lists:  # the version's one home
    VERSION = re.search(r"project\(fsdpskip VERSION ([0-9.]+)", cmake_lists.read()).group(1)


def _first(pattern):
    found = sorted(glob.glob(pattern))
    return found[0] if found else None


FLAVOURS = {
    # package: (bash init file, modulefile directory under the prefix)
    "lmod": (_first("/usr/share/lmod/lmod/init/bash") or _first("/usr/share/lmod/*/init/bash"), "lmod"),
    "environment-modules": ("/usr/share/modules/init/bash", "tcl"),
}

# Variables the module tools keep for themselves; everything else must come back exactly.
BOOKKEEPING = ("__LMOD", "_ModuleTable", "LMOD", "_LMFILES_", "LOADEDMODULES", "__MODULES", "MODULES_", "BASH_FUNC_",
               "_")


@pytest.fixture(params=sorted(FLAVOURS), scope="module")
def flavour(request):
    package = request.param
    installed = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package], capture_output=True,
                               text=True).stdout.endswith("installed")
    init = FLAVOURS[package][0]
    if not (installed and init and os.path.exists(init)):
        require(package, False, "%s is not installed (tools/test runs it)" % package)
    return package


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    prefix = tmp_path_factory.mktemp("install") / "fsdpskip"
    done = subprocess.run(["cmake", "--install", BUILD_DIR, "--prefix", str(prefix)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return prefix


def session(flavour, prefix, script, **variables):
    """Runs `script` in bash with the module command set up and the
    installed modulefiles on MODULEPATH; returns the CompletedProcess."""
    init, directory = FLAVOURS[flavour]
    env = environment(False, **variables)
    for name in list(env):
        if name.startswith(("FSDPSKIP_MODULE", "MODULEPATH", "LOADEDMODULES", "_LMFILES_", "__LMOD", "_ModuleTable")):
            del env[name]
    # Lmod drops duplicate PATH entries whenever it changes PATH: start without any.
    entries = env["PATH"].split(":")
    env["PATH"] = ":".join(entry for i, entry in enumerate(entries) if entry not in entries[:i])
    head = "set -u\nsource %s\nmodule use %s\n" % (init, prefix / "share" / "modulefiles" / directory)
    return subprocess.run(["bash", "-c", head + script], env=env, capture_output=True, text=True, timeout=600)


def dumps(tmp_path):
    return tmp_path / "before", tmp_path / "loaded", tmp_path / "after"


def read_environment(path):
    entries = path.read_bytes().split(b"\0")
    variables = dict(entry.decode().split("=", 1) for entry in entries if b"=" in entry)
    return {k: v for k, v in variables.items() if not k.startswith(BOOKKEEPING)}


def test_load_sets_the_paths_and_unload_restores_everything(flavour, prefix, tmp_path):
    before, loaded, after = dumps(tmp_path)
    done = session(flavour, prefix, """
        env -0 > {before}
        module load fsdpskip
        env -0 > {loaded}
        command -v fsdpskip
        module unload fsdpskip
        env -0 > {after}
    """.format(before=before, loaded=loaded, after=after), LD_PRELOAD=LIBM)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(prefix / "bin" / "fsdpskip")
    during = read_environment(loaded)
    assert during["FSDPSKIP_ROOT"] == str(prefix)
    assert during["FSDPSKIP_LIB"] == str(prefix / "lib" / "libfsdpskip.so")
    assert during["PATH"].split(":")[0] == str(prefix / "bin")
    assert during["LD_PRELOAD"] == LIBM, "by default the module leaves LD_PRELOAD alone"
    assert read_environment(after) == read_environment(before)


def test_two_rank_job_through_the_module(flavour, prefix, tmp_path):
    out, reports = tmp_path / "out", tmp_path / "reports"
    out.mkdir()
    reports.mkdir()
    done = session(flavour, prefix, """
        module load fsdpskip
        fsdpskip run --mode on --report {reports}/rank%r.json -- \\
            {python} {launch} --nproc 2 -- {load_model} --out {out} --size tiny --style hf4 --sync ddp --verify
        fsdpskip report --json {reports}
        module unload fsdpskip
        echo "after: ${{FSDPSKIP_ROOT-unset}} $(command -v fsdpskip || echo gone)"
    """.format(reports=reports, python=PYTHON, launch=LAUNCH, load_model=LOAD_MODEL, out=out))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    ranks = [json.loads((out / ("rank%d.json" % r)).read_text()) for r in (0, 1)]
    assert [r["equal_to_rank0"] for r in ranks] == [True, True]
    verdict = json.loads(done.stdout[done.stdout.index("{"):done.stdout.rindex("}") + 1])
    assert verdict["verdict"] == "pass" and verdict["processes"][0]["rank"] == 1
    assert sum(verdict["processes"][0]["calls"].values()) > 0
    assert done.stdout.strip().endswith("after: unset gone")


@pytest.mark.parametrize("previous", [None, LIBM, LIBM + " " + system_library("libdl.so.2")])
def test_opt_in_sets_ld_preload_and_unload_restores_it_exactly(flavour, prefix, previous):
    variables = {"LD_PRELOAD": previous} if previous is not None else {}
    done = session(flavour, prefix, """
        export FSDPSKIP_MODULE_LD_PRELOAD=1
        module load fsdpskip
        echo "loaded: $LD_PRELOAD"
        FSDPSKIP=on FSDPSKIP_LOCAL_RANK=1 {python} {scenarios} hf_init_weights >/dev/null
        unset FSDPSKIP_MODULE_LD_PRELOAD   # unloading undoes what loading did regardless
        module unload fsdpskip
        echo "unloaded: ${{LD_PRELOAD-<unset>}}"
    """.format(python=PYTHON, scenarios=SCENARIOS), **variables)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    library = str(prefix / "lib" / "libfsdpskip.so")
    assert lines[0] == "loaded: " + " ".join([library] + ([previous] if previous else []))
    assert "fsdpskip: local rank 1" in done.stderr and "skipped" in done.stderr, "the preload was active"
    assert lines[-1] == "unloaded: " + (previous if previous is not None else "<unset>")


def test_malformed_opt_in_warns_and_leaves_ld_preload(flavour, prefix):
    done = session(flavour, prefix, """
        FSDPSKIP_MODULE_LD_PRELOAD=maybe module load fsdpskip
        echo "loaded: $LD_PRELOAD"
    """, LD_PRELOAD=LIBM)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "loaded: " + LIBM
    assert "FSDPSKIP_MODULE_LD_PRELOAD=maybe is not 1 or 0" in done.stderr


def test_one_version_at_a_time(flavour, prefix, tmp_path):
    _, directory = FLAVOURS[flavour]
    other = tmp_path / "modulefiles" / "fsdpskip"
    other.mkdir(parents=True)
    suffix = ".lua" if flavour == "lmod" else ""
    shutil.copy(str(prefix / "share" / "modulefiles" / directory / "fsdpskip" / (VERSION + suffix)),
                str(other / ("0.0.9" + suffix)))
    done = session(flavour, prefix, """
        module use {other}
        module load fsdpskip/{version}
        module load fsdpskip/0.0.9 || true
        module -t list 2>&1 | grep -c '^fsdpskip/' || true
    """.format(other=tmp_path / "modulefiles", version=VERSION))
    assert done.stdout.strip().splitlines()[-1] == "1", done.stdout + done.stderr


def test_help_and_whatis(flavour, prefix):
    done = session(flavour, prefix, "module help fsdpskip 2>&1; module whatis fsdpskip 2>&1")
    assert done.returncode == 0, done.stderr
    for needle in ("fsdpskip run -- torchrun", "FSDPSKIP_MODULE_LD_PRELOAD=1", "Name: fsdpskip",
                   "Version: " + VERSION, "Description:", "URL: file://%s/share/doc/fsdpskip/README.md" % prefix):
        assert needle in done.stdout, needle


def test_modulefile_passes_the_tools_own_checker(flavour, prefix):
    if flavour == "lmod":
        done = session(flavour, prefix, "module --checkSyntax load fsdpskip")
        assert done.returncode == 0 and "error" not in (done.stdout + done.stderr).lower(), done.stderr
        return
    # Environment Modules' `module lint` runs the Nagelfar Tcl linter, which
    # Debian does not package; where one is installed, lint must be clean.
    if not (shutil.which("nagelfar.tcl") or shutil.which("nagelfar") or os.environ.get("MODULES_TCL_LINTER")):
        pytest.skip("module lint needs Nagelfar, which Debian does not package")
    done = session(flavour, prefix, "module lint fsdpskip")
    assert done.returncode == 0 and "ERROR" not in done.stderr and "WARNING" not in done.stderr, done.stderr
