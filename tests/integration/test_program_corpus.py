"""LD_PRELOAD reaches every program a job starts. Every program in /usr/bin
and /usr/sbin that answers `--version` (or, failing that, `--help`) the same
way every time prints the same stdout and stderr and exits with the same status
under the preload, in an inactive environment and in an active one
(LOCAL_RANK=1 FSDPSKIP=on): 0 differences.

The programs never run as root over the machine's own files (some act
despite `--version`), nor as the user running the suite (`killall5` would
signal every process of theirs): the test needs root, and each worker thread
runs its programs as a uid of its own that no account and no process uses
(setpriv), so that a program that signals every process it may reaches only
its own run, and what a program leaves behind is killed by uid (kill(-1)
sent as that uid). A program is
left out when its own plain runs differ (pids, times, the order of its
subprocesses' output, its environment: a difference under the preload is
checked against RECHECKS more plain runs, in both environments) or do not
end within PLAIN_LIMIT (a prompt, a server); a program that answers is never
left out for its time.

`python3 test_program_corpus.py` (with FSDPSKIP_PRELOAD set) prints the
figures the README gives."""
import concurrent.futures
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile

from harness import require

PRELOAD = os.path.abspath(os.environ["FSDPSKIP_PRELOAD"])
DIRECTORIES = ("/usr/bin", "/usr/sbin")
ARGUMENTS = ("--version", "--help")
ACTIVE = {"LOCAL_RANK": "1", "FSDPSKIP": "on"}
BASE = {"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME": "/nonexistent", "LANG": "C.UTF-8",
        "TERM": "dumb"}
WORKERS = 8  # most runs take milliseconds; a few wait on a terminal until their limit
PLAIN_LIMIT = 30  # s: a plain run still going by then does not answer
RECHECKS = 8  # more plain runs when a preloaded one differs: is the program itself steady?
PRELOADED_LIMIT = 300  # s: a preloaded run still going by then is a hang, and a difference
MINIMUM = 100  # fewer answering programs than this means the corpus itself went wrong


def programs():
    found = set()
    for directory in DIRECTORIES:
        for name in os.listdir(directory):
            path = os.path.join(directory, name)
            if os.path.isfile(path) and os.access(path, os.X_OK):
                found.add(path)
    return sorted(found)


def unused_uids(count):
    """Uids no account names and no process runs as."""
    import pwd
    named = {entry.pw_uid for entry in pwd.getpwall()}
    running = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/status" % pid) as f:
                running.update(int(line.split()[1]) for line in f if line.startswith("Uid:"))
        except OSError:
            pass
    return [uid for uid in range(61000, 62000) if uid not in named and uid not in running][:count]


class Runner:
    def __init__(self, uid):
        self.uid = uid
        self.prefix = ["setpriv", "--reuid=%d" % uid, "--regid=%d" % uid, "--clear-groups", "--"]
        # What a program leaves in its temporary directory (bashbug's
        # bbug.<pid>, glog's logs) lands in one of the uid's own.
        self.tmp = tempfile.mkdtemp(prefix="corpus-%d-" % uid)
        os.chown(self.tmp, uid, uid)
        self.found_in_tmp = self.owned_in_tmp()

    def owned_in_tmp(self):
        """The uid's entries in /tmp itself, where some programs write
        regardless of TMPDIR."""
        owned = set()
        for entry in os.scandir("/tmp"):
            with contextlib.suppress(FileNotFoundError):  # another test's, gone meanwhile
                if entry.stat(follow_symlinks=False).st_uid == self.uid:
                    owned.add(entry.path)
        return owned

    def remove(self):
        """The uid's directory, and what its programs left in /tmp."""
        shutil.rmtree(self.tmp, ignore_errors=True)
        for path in self.owned_in_tmp() - self.found_in_tmp:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path)

    def run(self, command, preload, variables, limit):
        """(status, stdout, stderr), or None for a run still going after `limit`."""
        env = dict(BASE, TMPDIR=self.tmp, **variables)
        if preload:
            env["LD_PRELOAD"] = PRELOAD
        # "/" is no place the uid may write to.
        process = subprocess.Popen(self.prefix + command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, cwd="/", env=env, start_new_session=True)
        try:
            out, err = process.communicate(timeout=limit)
            result = (process.returncode, out, err)
        except subprocess.TimeoutExpired:
            result = None
        self.kill_leftovers()
        if result is None:
            process.communicate(timeout=PLAIN_LIMIT)  # every holder of its pipes is gone now
        return result

    def kill_leftovers(self):
        """Every process of the uid, daemons that left the run's session too:
        kill(-1) sent as the uid reaches all of them but the sender, in one
        call (a process whose SIGKILL is pending cannot fork), with no scan
        of /proc."""
        subprocess.run(self.prefix + ["kill", "-KILL", "-1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def check(self, program):
        """(argument, [what differed]), or None when the program does not answer
        either argument the same way every time, or does not end."""
        for argument in ARGUMENTS:
            command = [program, argument]
            plain = self.run(command, False, ACTIVE, PLAIN_LIMIT)
            if plain is None:
                return None
            differences = []
            for name, variables in (("inactive", {}), ("active", ACTIVE)):
                preloaded = self.run(command, True, variables, PRELOADED_LIMIT)
                if preloaded != plain:
                    differences.append("%s: %s" % (name, difference(plain, preloaded)))
            # A difference counts only where the program's own runs, in both
            # environments, all answer as its first one did.
            if differences and any(self.run(command, False, (ACTIVE, {})[i % 2], PLAIN_LIMIT) != plain
                                   for i in range(RECHECKS)):
                continue
            return argument, differences
        return None


def difference(plain, preloaded):
    """What differs between two runs, in one short clause."""
    if preloaded is None:
        return "the preloaded run was still going after %d s" % PRELOADED_LIMIT
    clauses = []
    if plain[0] != preloaded[0]:
        clauses.append("status %d, preloaded %d" % (plain[0], preloaded[0]))
    for stream, a, b in (("stdout", plain[1], preloaded[1]), ("stderr", plain[2], preloaded[2])):
        if a != b:
            lines_a, lines_b = a.splitlines(), b.splitlines()
            at = next((i for i, (x, y) in enumerate(zip(lines_a, lines_b)) if x != y), min(len(lines_a), len(lines_b)))
            line = lambda lines: lines[at][:160] if at < len(lines) else b"(ended)"
            clauses.append("%s line %d: %r, preloaded %r" % (stream, at + 1, line(lines_a), line(lines_b)))
    return "; ".join(clauses)


def check_corpus():
    """{program: (argument, differences)} for every program that answered, and
    the list of programs that did not."""
    uids = unused_uids(WORKERS)
    assert len(uids) == WORKERS, "no unused uids for the corpus"
    runners = [Runner(uid) for uid in uids]
    todo = programs()
    try:
        with concurrent.futures.ThreadPoolExecutor(WORKERS) as pool:
            # Each worker takes every WORKERS-th program under its own uid.
            chunks = [pool.submit(lambda i: [(p, runners[i].check(p)) for p in todo[i::WORKERS]], i)
                      for i in range(WORKERS)]
            results = [item for chunk in chunks for item in chunk.result()]
    finally:
        for runner in runners:
            runner.remove()
    answered = {program: outcome for program, outcome in results if outcome is not None}
    return answered, sorted(program for program, outcome in results if outcome is None)


def assert_preload_reaches_programs():
    """Else the comparison says nothing (a path the uid cannot read)."""
    runner = Runner(unused_uids(1)[0])
    try:
        probe = runner.run(["/bin/true"], True, dict(ACTIVE, FSDPSKIP_LOG="debug"), PRELOADED_LIMIT)
    finally:
        runner.remove()
    assert probe and b"decision at start-up" in probe[2], probe


def test_every_answering_program_is_unchanged_by_the_preload():
    require("root", os.geteuid() == 0, "runs the programs as unused uids: needs root")
    assert_preload_reaches_programs()
    answered, _ = check_corpus()
    assert len(answered) >= MINIMUM, "only %d programs answered" % len(answered)
    differing = {program: found for program, (_, found) in answered.items() if found}
    assert not differing, "\n".join("%s %s" % item for item in sorted(differing.items()))


if __name__ == "__main__":
    assert_preload_reaches_programs()
    answered, silent = check_corpus()
    by_argument = {argument: sum(1 for a, _ in answered.values() if a == argument) for argument in ARGUMENTS}
    differing = sorted(program for program, (_, found) in answered.items() if found)
    print("%d programs in %s; %d answered the same way every time (%s); %d left out; %d differ under the preload"
          % (len(answered) + len(silent), " and ".join(DIRECTORIES), len(answered),
             ", ".join("%d %s" % (n, a) for a, n in by_argument.items()), len(silent), len(differing)))
    print("left out:", " ".join(os.path.basename(p) for p in silent))
    for program in differing:
        print(program, answered[program][1])
    sys.exit(1 if differing else 0)
