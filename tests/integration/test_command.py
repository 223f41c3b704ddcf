"""The fsdpskip command: `run` in front of real launchers and programs,
`report` over a real job's reports, `doctor` against the real torch (and ELF
fixtures linked the ways that defeat interposition), and a relocated
`cmake --install` tree."""
import json
import os
import re
import shutil
import subprocess

import pytest

from harness import (BUILD_DIR, COMMAND, LIBM, LOAD_MODEL, PRELOAD, PYTHON, SCENARIOS, SOURCE_DIR, foreign_plugin,
                     other_architecture_copy, rank_lines, run, summary_lines, torch_library, torchrun)


def fsdpskip(*args, command=COMMAND, **variables):
    return run([command] + list(args), preload=False, **variables)


def printed_environment(done):
    return dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)


# --- run -------------------------------------------------------------------

def test_run_puts_the_preload_first_and_keeps_what_was_there():
    done = fsdpskip("run", "--", "env", LD_PRELOAD=LIBM)
    assert done.returncode == 0, done.stderr
    assert printed_environment(done)["LD_PRELOAD"] == PRELOAD + " " + LIBM


def test_run_never_duplicates_the_preload(tmp_path):
    done = fsdpskip("run", "--", "env", LD_PRELOAD="%s:%s" % (LIBM, os.path.realpath(PRELOAD)))
    assert printed_environment(done)["LD_PRELOAD"] == PRELOAD + " " + LIBM
    other_build = tmp_path / "libfsdpskip.so"  # another install's copy goes too
    shutil.copy(PRELOAD, str(other_build))
    done = fsdpskip("run", "--", "env", LD_PRELOAD="%s %s" % (other_build, LIBM))
    assert printed_environment(done)["LD_PRELOAD"] == PRELOAD + " " + LIBM


def test_run_sets_only_the_variables_it_is_given():
    done = fsdpskip("run", "--mode", "audit", "--log", "debug", "--report", "/tmp/r-%r.json", "--", "env")
    variables = printed_environment(done)
    assert (variables["FSDPSKIP"], variables["FSDPSKIP_LOG"], variables["FSDPSKIP_REPORT"]) == (
        "audit", "debug", "/tmp/r-%r.json")
    inherited = printed_environment(fsdpskip("run", "env", FSDPSKIP="on"))  # no "--" is fine too
    assert inherited["FSDPSKIP"] == "on" and "FSDPSKIP_LOG" not in inherited


def test_run_passes_the_exit_status_and_arguments_through():
    done = fsdpskip("run", "--", "sh", "-c", 'echo "$@"; exit 7', "sh", "--mode", "x")
    assert done.returncode == 7 and done.stdout == "--mode x\n"


def test_run_hands_every_word_from_the_command_on_to_it_without_a_separator():
    """No `--`: the first word that is not one of run's options is the command,
    and its own --help and --mode are its, not run's."""
    done = fsdpskip("run", "--log", "quiet", "sh", "-c", 'echo "$@"', "sh", "--help", "--mode", "maybe", "--")
    assert done.returncode == 0 and done.stdout == "--help --mode maybe --\n", done.stdout + done.stderr


@pytest.mark.parametrize("args,status,needle", [
    (["run", "--mode", "maybe", "--", "true"], 2, "--mode: maybe not in {auto,on,off,audit}"),
    (["run", "--log", "loud", "--", "true"], 2, "--log: loud not in {quiet,summary,debug,trace}"),
    (["run", "--"], 2, "fsdpskip run: no command given"),
    (["run", "--", "/nonexistent/program"], 127, "fsdpskip run: cannot run '/nonexistent/program'"),
    (["frobnicate"], 2, "frobnicate"),
])
def test_run_refuses_bad_arguments_with_one_clear_line(args, status, needle):
    done = fsdpskip(*args)
    assert done.returncode == status and needle in done.stderr and done.stdout == "", done.stderr


def test_every_subcommand_has_help():
    for subcommand in ("run", "doctor", "report", "plugin build", "plugin list"):
        done = fsdpskip(*subcommand.split(), "--help")
        assert done.returncode == 0 and "fsdpskip %s [OPTIONS]" % subcommand in done.stdout, done.stdout
        assert "--help" in done.stdout and "Exit status" in done.stdout or subcommand == "run"


@pytest.mark.every_torch
@pytest.mark.second_build
def test_two_rank_job_through_run_then_report(tmp_path):
    """fsdpskip run -- torchrun …, then fsdpskip report over its reports:
    their directory made by the rank that writes (a user's first
    `--report "$PWD/rep/%h-%r.json"`), every expected rank's report there."""
    out, reports = tmp_path / "out", tmp_path / "reports" / "job"
    out.mkdir()
    done, ranks = torchrun([LOAD_MODEL, "--out", str(out), "--size", "tiny", "--style", "hf4", "--sync", "ddp",
                            "--verify"], str(out), preload=False, agent=True,
                           prefix=[COMMAND, "run", "--mode", "on", "--report", str(reports / "rank%r.json"), "--"])
    assert [r["equal_to_rank0"] for r in ranks] == [True, True]
    summary = summary_lines("\n".join(rank_lines(done, 1)), 1)
    assert len(summary) == 1 and summary[0].endswith("pending 0"), summary
    assert os.listdir(str(reports)) == ["rank1.json"], "only rank 1 is active"

    table = fsdpskip("report", str(reports))
    assert table.returncode == 0, table.stdout + table.stderr
    assert "verdict: pass" in table.stdout
    gathered = json.loads(fsdpskip("report", "--json", str(reports)).stdout)
    assert gathered["verdict"] == "pass" and gathered["totals"]["pending"] == 0
    [process] = gathered["processes"]
    assert process["rank"] == 1 and process["local_rank"] == 1 and sum(process["calls"].values()) > 0
    assert process["world_size"] == 2 and process["local_world_size"] == 2
    assert gathered["totals"]["skipped_calls"] == sum(process["calls"].values())
    assert gathered["totals"]["expected_reports"] == 1 and gathered["totals"]["missing_ranks"] == []
    assert not any("missing" in note for note in gathered["notes"]), gathered["notes"]

    # The same report as schema version 1 wrote it (before storages_tagged): still read.
    with open(str(reports / "rank1.json")) as f:
        report = json.load(f)
    assert report["schema_version"] == 3 and report["storages_tagged"] > 0
    assert report["storages_replayed"] == 0  # rank 1 only receives
    report["schema_version"] = 1
    del report["storages_tagged"], report["storages_replayed"]
    with open(str(reports / "rank1.json"), "w") as f:
        json.dump(report, f)
    older = json.loads(fsdpskip("report", "--json", str(reports)).stdout)
    assert older["verdict"] == "pass" and older["processes"][0]["storages_tagged"] == 0, older


# --- report ----------------------------------------------------------------

def test_report_names_the_ranks_whose_reports_are_missing(tmp_path):
    """A real rank's report, as the one report found of an 8-rank job on two
    nodes of 4: ranks 2, 3, 5, 6 and 7 (local ranks from 1) are named as
    missing and the verdict fails; of a job of unknown size, a note says it
    cannot check and the verdict stands."""
    done = run([PYTHON, SCENARIOS, "hf_init_weights"], FSDPSKIP="on", LOCAL_RANK="1", RANK="1", WORLD_SIZE="8",
               LOCAL_WORLD_SIZE="4", FSDPSKIP_REPORT=str(tmp_path / "r-%r.json"))
    assert done.returncode == 0, done.stderr
    table = fsdpskip("report", str(tmp_path))
    assert table.returncode == 1, table.stdout
    assert "FAIL: 5 of the 6 expected reports missing (every local rank from 1 writes one): ranks 2, 3, 5, 6, 7;" in \
        table.stdout and "verdict: fail" in table.stdout, table.stdout
    gathered = json.loads(fsdpskip("report", "--json", str(tmp_path)).stdout)
    assert gathered["totals"]["expected_reports"] == 6 and gathered["totals"]["missing_ranks"] == [2, 3, 5, 6, 7]

    report = json.loads((tmp_path / "r-1.json").read_text())
    report["world_size"] = report["local_world_size"] = -1  # no size variable was set
    (tmp_path / "r-1.json").write_text(json.dumps(report))
    table = fsdpskip("report", str(tmp_path))
    assert table.returncode == 0 and "note: cannot check for missing reports: no report says the job's size" in \
        table.stdout, table.stdout

@pytest.mark.every_torch
def test_report_fails_when_a_storage_is_pending(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    torchrun([LOAD_MODEL, "--out", str(out), "--size", "tiny", "--style", "hf4", "--sync", "none", "--hold"],
             str(out), FSDPSKIP="on", FSDPSKIP_LOG="quiet", FSDPSKIP_REPORT=str(tmp_path / "r-%l.json"))
    table = fsdpskip("report", str(tmp_path / "r-1.json"))
    assert table.returncode == 1
    assert "FAIL:" in table.stdout and "pending" in table.stdout and "verdict: fail" in table.stdout
    gathered = json.loads(fsdpskip("report", "--json", str(tmp_path / "r-1.json")).stdout)
    assert gathered["verdict"] == "fail" and gathered["totals"]["pending"] > 0


LOADED_NOT_INITIALISED = """
import sys
import torch
import torch.distributed as dist
# Parameters whose values arrive by loading (a checkpoint read on every rank,
# as transformers >= 5.23 does): tagged, never initialised in place; then, as
# a rank of a job, rank 0's values by broadcast (a world of one, rank 0's own).
state = {"weight": torch.arange(4096.0), "bias": torch.ones(64)}
parameters = [torch.nn.Parameter(t.clone()) for t in state.values()]
if sys.argv[1] == "synced":
    dist.init_process_group("gloo", init_method="file://" + sys.argv[2], rank=0, world_size=1)
    for p in parameters:
        dist.broadcast(p.data, 0)
print(float(sum(p.sum() for p in parameters)))
"""


@pytest.mark.parametrize("synced", ["synced", "unsynced"])
def test_a_rank_that_loaded_its_parameters_says_nothing_was_skipped_and_why(tmp_path, synced):
    """Synced: one line at the default level, at exit and per rank in the
    report. Unsynced, as a helper process that made a parameter or two:
    nothing at all. The program's output is as without fsdpskip."""
    program = [PYTHON, "-c", LOADED_NOT_INITIALISED, synced]
    plain = run(program + [str(tmp_path / "plain-store")], preload=False)
    done = run(program + [str(tmp_path / "store")], FSDPSKIP="on", LOCAL_RANK="1",
               FSDPSKIP_REPORT=str(tmp_path / "r-%l.json"))
    assert done.returncode == 0 and done.stdout == plain.stdout, done.stderr
    said = [line for line in done.stderr.splitlines() if "fsdpskip:" in line]
    assert summary_lines(done.stderr) == []
    table = fsdpskip("report", str(tmp_path / "r-1.json"))
    assert table.returncode == 0, table.stdout + table.stderr
    if synced == "unsynced":
        assert said == [] and "nothing skipped" not in table.stdout, (said, table.stdout)
        return
    assert len(said) == 1 and re.match(r"fsdpskip: local rank 1 pid \d+: nothing skipped: 2 parameter storages "
                                       r"tagged, none initialised .*most likely loaded", said[0]), said
    assert re.search(r"note: .* rank -1 pid \d+: nothing skipped: its parameters were most likely loaded",
                     table.stdout), table.stdout


@pytest.mark.parametrize("name,content,needle", [
    ("truncated.json", '{"schema": "fsdpskip-report", "schema_ver', "not JSON, or truncated"),
    ("other.json", '{"schema": "something-else"}', "not a fsdpskip report"),
    ("future.json", '{"schema": "fsdpskip-report", "schema_version": 4}', "schema version 4"),
    ("r.json.partial.123", "{", "incomplete"),
    # Found by tools/fuzz: fields of another type made `fsdpskip report` throw and abort.
    ("schema-number.json", '{"schema": 5, "schema_version": "1"}', "not a fsdpskip report"),
    ("types.json", '{"schema": "fsdpskip-report", "schema_version": 1, "host": 5, "pending_count": "none"}',
     "is missing or not a count"),
])
def test_report_fails_on_a_report_it_cannot_vouch_for(tmp_path, name, content, needle):
    (tmp_path / name).write_text(content)
    done = fsdpskip("report", str(tmp_path))
    assert done.returncode == 1 and needle in done.stdout and "verdict: fail" in done.stdout


def test_report_without_reports_says_how_to_get_them(tmp_path):
    done = fsdpskip("report", str(tmp_path))
    assert done.returncode == 2 and "no reports" in done.stderr and "--report" in done.stderr
    done = fsdpskip("report", str(tmp_path / "missing"))
    assert done.returncode == 2 and "no such file or directory" in done.stderr


# --- doctor ----------------------------------------------------------------

def doctor_json(*args, **variables):
    done = fsdpskip("doctor", "--json", *args, **variables)
    return done.returncode, json.loads(done.stdout)


@pytest.mark.every_torch
@pytest.mark.second_build
@pytest.mark.emulated
def test_doctor_passes_this_torch_with_every_probe(tmp_path):
    # One run (its live probe is the slow part) for the table and the JSON.
    human = fsdpskip("doctor", "--python", PYTHON, "--json-file", str(tmp_path / "doctor.json"))
    with open(tmp_path / "doctor.json") as written:
        result = json.load(written)
    checks = {c["check"]: c for c in result["checks"]}
    assert human.returncode == 0 and result["verdict"] == "ok", json.dumps(result, indent=1) + human.stderr
    assert "verdict: fsdpskip can work with this torch" in human.stdout, human.stdout
    for name, c in checks.items():
        assert re.search(r"^%s +%s " % (re.escape(name), re.escape(c["status"])), human.stdout, re.M), (name, human.stdout)
    import torch
    assert result["torch"]["version"] == torch.__version__
    probes = {name: c for name, c in checks.items() if name.startswith("probe ")}
    for step in ("set_requires_grad", "normal_", "uniform_", "zero_", "fill_ (Scalar)", "fill_ (Tensor)", "set_data",
                 "copy_ (conversion)", "trunc_normal_", "errors pass through", "gloo broadcast", "report"):
        assert probes["probe " + step]["status"] == "ok", probes
    # trunc_normal_'s own steps: up to torch 2.11 each is skipped and joins
    # the recipe; from 2.12 the rejection test reads what it drew.
    import inspect
    chain = "erfinv" in inspect.getsource(torch.nn.init._no_grad_trunc_normal_)
    assert probes["probe chain (erfinv_, mul_, add_, clamp_)"]["status"] == ("ok" if chain else "n/a"), probes
    assert probes["probe comparisons (lt, gt, bitwise_or, any)"]["status"] == "n/a", probes
    # Every row of the hook table is found, except NCCL's where this torch
    # has no CUDA (asserted below) and a row whose function this release
    # mangles as another row does (c10::optional or std::optional, the group
    # by value or by reference), which must then be found.
    found = {name.split("[")[1].rstrip("]") for name, c in checks.items()
             if name.startswith("symbol ") and c["status"] == "ok"}
    for name, c in checks.items():
        if name.startswith("symbol ") and not ("NCCL" in name or " nccl" in name) and c["status"] != "ok":
            other = re.fullmatch(r"this release has the other mangling \((\w+)\)", c["detail"])
            assert c["status"] == "n/a" and other and other.group(1) in found, c
    with open(os.path.join(SOURCE_DIR, "src", "preload", "hooks.def")) as table:
        rows = set(re.findall(r"^HOOK\((\w+),", table.read(), re.M))
    assert {name.split("[")[1].rstrip("]") for name in checks if name.startswith("symbol ")} == rows
    assert checks["plugin"]["status"] == "ok"
    # The platform row, from the running system; the plugin's architecture, from its file.
    import platform
    import resource
    here = {"x86_64": "x86-64", "aarch64": "AArch64"}[platform.machine()]
    page = resource.getpagesize()
    assert result["platform"]["architecture"] == here and result["platform"]["page_size"] == page, result["platform"]
    assert result["platform"]["glibc"] == platform.libc_ver()[1], result["platform"]
    assert checks["platform"]["detail"] == "%s (kernel %s), %d KiB pages, glibc %s" % (
        here, platform.machine(), page >> 10, platform.libc_ver()[1]), checks["platform"]
    assert checks["plugin"]["detail"].endswith(", %s)" % here), checks["plugin"]
    # The C++ ABI, as torch itself says it.
    abi = "cxx11 ABI (_GLIBCXX_USE_CXX11_ABI=1)" if torch.compiled_with_cxx11_abi() else "pre-cxx11 ABI"
    assert checks["C++ ABI"]["status"] == "ok" and abi in checks["C++ ABI"]["detail"], checks["C++ ABI"]
    # A CUDA build (PyPI's wheels): ProcessGroupNCCL and NCCL's C API are
    # reached through libtorch_cuda's relocations too.
    nccl = {name: c["status"] for name, c in checks.items()
            if name.startswith("symbol ") and ("NCCL" in name or " nccl" in name)}
    assert len(nccl) == 7, checks.keys()
    if torch.cuda.is_available() or torch.version.cuda:
        assert set(nccl.values()) == {"ok"}, nccl
    else:
        assert set(nccl.values()) == {"n/a"}, nccl


@pytest.mark.every_torch
@pytest.mark.second_build
def test_doctor_names_a_plugin_built_for_another_torch(tmp_path):
    status, result = doctor_json("--python", PYTHON, FSDPSKIP_PLUGIN=foreign_plugin(tmp_path))
    plugin = next(c for c in result["checks"] if c["check"] == "plugin")
    assert status == 1 and result["verdict"] == "fail"
    assert plugin["status"] == "FAIL" and "built for torch 9.9.9" in plugin["detail"]
    assert plugin["detail"].endswith("build one: fsdpskip plugin build --python " + PYTHON), "the command that builds one"


@pytest.mark.every_torch
@pytest.mark.parametrize("python,needle", [
    ("/bin/false", "cannot import torch"),
    ("/bin/true", "did not answer as a Python with torch would"),
    ("/nonexistent/python3", "cannot import torch"),
])
def test_doctor_without_a_torch_says_so(python, needle):
    status, result = doctor_json("--python", python)
    torch = next(c for c in result["checks"] if c["check"] == "torch")
    assert status == 1 and torch["status"] == "FAIL" and needle in torch["detail"], result["checks"]


@pytest.mark.emulated
@pytest.mark.parametrize("kind", ["truncated", "fifo", "not_elf", "other_architecture"])
def test_doctor_on_a_broken_libtorch_fails_cleanly(tmp_path, kind):
    """The command reads ELF files itself: a cut copy, a FIFO (never waited
    on), a text file named libtorch_cpu.so or a library of the other
    architecture is a FAIL row, not a crash or a hang."""
    lib = tmp_path / "lib"
    lib.mkdir()
    target = lib / "libtorch_cpu.so"
    if kind == "truncated":
        with open(torch_library(), "rb") as f:
            target.write_bytes(f.read(1 << 16))
    elif kind == "fifo":
        os.mkfifo(str(target))
    elif kind == "other_architecture":
        _, other, here = other_architecture_copy(os.path.join(BUILD_DIR, "fixtures", "plt", "lib", "libtorch_cpu.so"),
                                                 target)
    else:
        target.write_text("not an ELF file")
    status, result = doctor_json("--libtorch", str(tmp_path))
    failed = [c for c in result["checks"] if c["status"] == "FAIL"]
    assert status == 1 and result["verdict"] == "fail" and failed, result
    assert any("reading libtorch_cpu" in c["check"] or "plugin" in c["check"] for c in failed), failed
    if kind == "other_architecture":
        assert any("is built for %s; this fsdpskip runs on %s" % (other, here) in c["detail"] for c in failed), failed


@pytest.mark.every_torch
@pytest.mark.second_build
@pytest.mark.emulated
def test_doctor_reads_a_libtorch_directory():
    import torch
    libdir = os.path.dirname(torch_library())
    status, result = doctor_json("--libtorch", libdir)
    assert status == 0, json.dumps(result, indent=1)
    assert result["torch"]["version"].split("+")[0][:3] == torch.__version__[:3]
    # The C++ probe (fsdpskip-probe, built with the plugin) ran every step.
    probes = {c["check"]: c["status"] for c in result["checks"] if c["check"].startswith("probe ")}
    for step in ("set_requires_grad", "normal_", "uniform_", "zero_", "fill_ (Scalar)", "fill_ (Tensor)", "set_data",
                 "copy_ (conversion)", "trunc_normal_", "errors pass through", "report"):
        assert probes["probe " + step] == "ok", probes
    assert probes["probe chain (erfinv_, mul_, add_, clamp_)"] == "ok", "the C++ probe runs the chain on every torch"
    assert probes["probe gloo broadcast"] == "n/a"


@pytest.mark.parametrize("variables,active,needle", [
    ({"LOCAL_RANK": "1", "ACCELERATE_USE_FSDP": "1"}, False, "mode auto, FSDP_CPU_RAM_EFFICIENT_LOADING is unset"),
    ({"FSDPSKIP": "on", "SLURM_LOCALID": "2"}, True, "mode on (FSDPSKIP=on), local rank 2 from SLURM_LOCALID"),
    ({"FSDPSKIP": "on", "LOCAL_RANK": "0"}, False, "local rank 0 reads the checkpoint"),
    ({"FSDPSKIP": "maybe", "LOCAL_RANK": "1"}, False, 'FSDPSKIP="maybe" is not valid'),
])
def test_doctor_shows_the_decision_for_this_environment(tmp_path, variables, active, needle):
    """The decision the preload would make here, with its reason, as
    FSDPSKIP_LOG=debug prints it (an ELF fixture: no probe runs)."""
    fixture = os.path.join(BUILD_DIR, "fixtures", "plt")
    human = fsdpskip("doctor", "--libtorch", fixture, "--json-file", str(tmp_path / "doctor.json"), **variables).stdout
    with open(tmp_path / "doctor.json") as written:
        decision = json.load(written)["decision"]
    assert decision["active"] is active and needle in decision["reason"] + decision["error"], decision
    assert decision["variables"] == variables
    assert "this environment: %s" % ("active" if active else "inactive") in human and needle in human, human


def test_doctor_names_a_json_file_it_cannot_write_in_one_line(tmp_path):
    """The table is still printed; then one line, and status 2."""
    fixture = os.path.join(BUILD_DIR, "fixtures", "plt")
    target = tmp_path / "missing" / "doctor.json"
    done = fsdpskip("doctor", "--libtorch", fixture, "--json-file", str(target))
    assert done.returncode == 2 and "verdict: " in done.stdout, done.stdout + done.stderr
    assert done.stderr == "fsdpskip doctor: cannot write %s: No such file or directory\n" % target, done.stderr


@pytest.mark.parametrize("variant,needles", [
    ("symbolic", ["linked with -Bsymbolic", "calls it directly"]),
    ("symbolic_functions", ["calls it directly (-Bsymbolic-functions or LTO)"]),
])
def test_doctor_detects_a_torch_that_binds_its_own_calls(variant, needles):
    """ELF fixtures (tests/fixtures/bound_torch.cc) linked as such a torch would be."""
    status, result = doctor_json("--libtorch", os.path.join(BUILD_DIR, "fixtures", variant))
    failures = " | ".join(c["detail"] for c in result["checks"] if c["status"] == "FAIL")
    assert status == 1
    for needle in needles:
        assert needle in failures
    zero = next(c for c in result["checks"] if "[zero]" in c["check"])
    assert zero["status"] == "FAIL"
    _, linked_as_usual = doctor_json("--libtorch", os.path.join(BUILD_DIR, "fixtures", "plt"))
    assert next(c for c in linked_as_usual["checks"] if "[zero]" in c["check"])["status"] == "ok"


def test_doctor_names_an_nccl_linked_in_statically():
    """A CUDA torch with no libnccl.so loaded beside libtorch_cuda.so: the
    NCCL rows cannot apply, and the doctor says why and what still works; a
    torch without CUDA has no NCCL at all."""
    _, static = doctor_json("--libtorch", os.path.join(BUILD_DIR, "fixtures", "static_nccl"))
    rows = [c for c in static["checks"] if c["check"].startswith("symbol nccl")]
    assert len(rows) == 6, static["checks"]
    for row in rows:
        assert row["status"] == "n/a" and "linked into it statically" in row["detail"], row
        assert "ProcessGroupNCCL row" in row["detail"]
    _, cpu_only = doctor_json("--libtorch", os.path.join(BUILD_DIR, "fixtures", "plt"))
    rows = [c for c in cpu_only["checks"] if c["check"].startswith("symbol nccl")]
    assert len(rows) == 6 and all(r["status"] == "n/a" and "no libnccl.so" in r["detail"] for r in rows), rows


# --- install ---------------------------------------------------------------

@pytest.mark.every_torch
@pytest.mark.second_build
def test_installed_tree_works_after_it_is_moved(tmp_path):
    first, moved = tmp_path / "first", tmp_path / "moved"
    install = subprocess.run(["cmake", "--install", BUILD_DIR, "--prefix", str(first)], capture_output=True,
                             text=True)
    assert install.returncode == 0, install.stderr
    shutil.move(str(first), str(moved))
    command = str(moved / "bin" / "fsdpskip")
    for path in ("lib/libfsdpskip.so", "lib/libfsdpskip_torch.so", "share/fsdpskip/probe.py",
                 "libexec/fsdpskip/fsdpskip-probe",
                 "share/doc/fsdpskip/README.md", "share/doc/fsdpskip/LICENSE", "share/doc/fsdpskip/docs/install.md"):
        assert (moved / path).is_file(), path
    # The manual's links lead somewhere in the installed tree as in the checkout.
    manual = moved / "share" / "doc" / "fsdpskip"
    pages = sorted(manual.rglob("*.md"))
    assert len(pages) > 15, pages
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            path = target.split("#")[0]
            if path and not re.match(r"[a-z]+:", path) and not (page.parent / path).exists():
                broken.append("%s: %s" % (page.relative_to(manual), target))
    assert not broken, broken
    status, result = doctor_json("--python", PYTHON, command=command)
    assert status == 0, json.dumps(result, indent=1)
    checks = {c["check"]: c["detail"] for c in result["checks"]}
    assert checks["preload"] == str(moved / "lib" / "libfsdpskip.so")
    assert checks["plugin"].startswith(str(moved / "lib" / "libfsdpskip_torch.so"))
    done = fsdpskip("run", "--mode", "on", "--", PYTHON, SCENARIOS, "hf_init_weights", command=command,
                    FSDPSKIP_LOCAL_RANK="1")
    assert done.returncode == 0 and "fsdpskip: local rank 1" in done.stderr and "skipped" in done.stderr
