"""The project's own CMake build as a cluster's build node runs it, where
GoogleTest is absent: the project configures and builds, and the test suite
is left out, saying so; asking for the tests there
(-DFSDPSKIP_BUILD_TESTS=ON, as every build under tools/ does) stops the
configure with one clear message. CMAKE_DISABLE_FIND_PACKAGE_GTest stands
in for a machine without it."""
import os
import pathlib
import tempfile

import pytest

from harness import BUILD_DIR, SOURCE_DIR, run


@pytest.fixture
def build():
    """A new build directory inside the project's build tree, whose paths the
    compile cache hashes relative to the checkout (tools/compile-cache): a
    later run compiles from the cache, where a directory of another random
    name under /tmp compiled every file anew."""
    parent = os.path.join(BUILD_DIR, "tmp")
    os.makedirs(parent, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="test_build.", dir=parent) as directory:
        yield pathlib.Path(directory) / "build"


def configure(build, *options):
    return run(["cmake", "-S", SOURCE_DIR, "-B", str(build), "-DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON",
                "-DFSDPSKIP_BUILD_BENCHMARKS=OFF"] + list(options), preload=False)


def test_without_googletest_the_project_configures_and_builds_without_its_tests(build):
    """The preload and the command are built here; the plugin, whose build
    takes most of the time and never involves GoogleTest, is built with the
    tests off by the one-install suite's pip install (tests/system)."""
    done = configure(build)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "fsdpskip: the test suite is not built (GoogleTest not found" in done.stdout, done.stdout[-2000:]
    rules = [build / name for name in ("build.ninja", "Makefile") if (build / name).exists()]  # either generator
    assert not (build / "CTestTestfile.cmake").exists() and rules and "unit_tests" not in rules[0].read_text()
    built = run(["cmake", "--build", str(build), "-j%d" % (os.cpu_count() or 1), "--target", "fsdpskip",
                 "fsdpskip_command"], preload=False, timeout=1200)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    for path in ("lib/libfsdpskip.so", "bin/fsdpskip"):
        assert (build / path).is_file(), path


def test_asking_for_the_tests_without_googletest_stops_the_configure(build):
    done = configure(build, "-DFSDPSKIP_BUILD_TESTS=ON")
    assert done.returncode != 0
    assert "fsdpskip: -DFSDPSKIP_BUILD_TESTS=ON needs GoogleTest (Debian: libgtest-dev)" in done.stderr, done.stderr
