"""The suites' classes of integration test, marked on the tests themselves.

A test without a class mark runs in the host's suite only (Debian 12's torch
1.13.1, the default class). A suite that repeats the host's elsewhere selects
the classes whose subject differs there (tests/CMakeLists.txt,
FSDPSKIP_INTEGRATION_CLASSES). A class mark with arguments selects only the
parametrized cases of those ids: @pytest.mark.emulated("hf4-ddp")."""
import atexit
import contextlib
import os
import shutil
import sys
import tempfile
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

CLASSES = {
    "every_torch": "depends on the torch it runs against: the LibTorch program, every row through its real original "
                   "and each release's inits, its errors, c10d jobs, the doctor against its libraries (the trixie "
                   "root and the pip venv run these)",
    "every_cpython": "depends on the CPython it runs in: its frame layout (the roots whose CPython is not the host's)",
    "second_build": "what a second build of a torch generation adds: its C++ ABI, libraries, packaging and "
                    "frameworks (the sid root, beside the pip venv's PyPI build)",
    "emulated": "what fits under qemu-user in the arm64 root",
    "sanitized": "what drives fsdpskip's code through real programs for ASan and UBSan to watch: the LibTorch "
                 "program, the Python scenarios and frames, the faults, 2-rank jobs (tools/sanitize)",
}


def pytest_addoption(parser):
    parser.addoption("--classes", default="", metavar="CLASS,...",
                     help="run only the tests marked with one of these classes (%s)" % ", ".join(CLASSES))


def pytest_configure(config):
    for name, meaning in CLASSES.items():
        config.addinivalue_line("markers", "%s(*ids): %s" % (name, meaning))
    unknown = set(filter(None, config.getoption("--classes").split(","))) - set(CLASSES)
    if unknown:
        raise ValueError("--classes: no class %s (the classes: %s)" % (", ".join(sorted(unknown)), ", ".join(CLASSES)))
    use_a_temporary_directory_of_this_session()


# This session's temporary directory, and whether it goes at the end.
session_directory = {"path": None, "remove": True}
KEPT_FOR = 24 * 3600  # s: how long a failed session's directory is kept


def use_a_temporary_directory_of_this_session():
    """What the tests' programs leave in the temporary directory (torchrun's
    agent keeps its log directory, a rank killed on purpose its FileStore, a
    program of the corpus its files) goes into one directory of this
    session's, through TMPDIR, which every program started here inherits;
    pytest's own tmp_path lies in it too. It is made where TMPDIR pointed
    (/tmp unless set): a short path, for the Unix sockets multiprocessing
    makes there. Traversable by every uid: the program corpus gives each of
    its uids a directory inside. Failed sessions' directories older than
    KEPT_FOR go first (no session runs that long)."""
    parent = tempfile.gettempdir()
    for entry in os.scandir(parent):
        with contextlib.suppress(OSError):
            if entry.name.startswith("fsdpskip-tests-") and time.time() - entry.stat().st_mtime > KEPT_FOR:
                shutil.rmtree(entry.path, ignore_errors=True)
    directory = tempfile.mkdtemp(prefix="fsdpskip-tests-", dir=parent)
    os.chmod(directory, 0o711)
    session_directory["path"] = directory
    os.environ["TMPDIR"] = directory
    tempfile.tempdir = None  # read TMPDIR again
    # At exit, after pytest's own cleanup of its tmp_path directories in it
    # (atexit runs the later registered first).
    atexit.register(remove_session_directory)


def pytest_sessionfinish(session, exitstatus):
    """A session where a test failed keeps its temporary directory, for a
    look at what the failing test's programs left."""
    session_directory["remove"] = exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED)


def remove_session_directory():
    if session_directory["remove"]:
        shutil.rmtree(session_directory["path"], ignore_errors=True)


def in_classes(item, classes):
    for mark in item.iter_markers():
        if mark.name in classes:
            case = getattr(item, "callspec", None)
            if not mark.args or (case is not None and case.id in mark.args):
                return True
    return False


def pytest_collection_modifyitems(config, items):
    classes = set(filter(None, config.getoption("--classes").split(",")))
    if not classes:
        return
    selected = [item for item in items if in_classes(item, classes)]
    config.hook.pytest_deselected(items=[item for item in items if item not in selected])
    items[:] = selected
