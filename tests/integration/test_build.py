"""The project's own CMake build as a cluster's build node runs it, where
GoogleTest is absent: the preload, the plugin and the command build and the
test suite is left out, saying so; asking for the tests there
(-DFSDPSKIP_BUILD_TESTS=ON, as every build under tools/ does) stops the
configure with one clear message. CMAKE_DISABLE_FIND_PACKAGE_GTest stands
in for a machine without it."""
import os

from harness import SOURCE_DIR, run


def configure(build, *options):
    return run(["cmake", "-S", SOURCE_DIR, "-B", str(build), "-DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON",
                "-DFSDPSKIP_BUILD_BENCHMARKS=OFF"] + list(options), preload=False)


def test_without_googletest_everything_but_the_tests_builds(tmp_path):
    build = tmp_path / "build"
    done = configure(build)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "fsdpskip: the test suite is not built (GoogleTest not found" in done.stdout, done.stdout[-2000:]
    built = run(["cmake", "--build", str(build), "-j%d" % (os.cpu_count() or 1)], preload=False, timeout=1200)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    for path in ("lib/libfsdpskip.so", "lib/libfsdpskip_torch.so", "bin/fsdpskip"):
        assert (build / path).is_file(), path
    assert not (build / "bin" / "unit_tests").exists() and not (build / "CTestTestfile.cmake").exists()


def test_asking_for_the_tests_without_googletest_stops_the_configure(tmp_path):
    done = configure(tmp_path / "build", "-DFSDPSKIP_BUILD_TESTS=ON")
    assert done.returncode != 0
    assert "fsdpskip: -DFSDPSKIP_BUILD_TESTS=ON needs GoogleTest (Debian: libgtest-dev)" in done.stderr, done.stderr
