"""A real Slurm: Debian 12's slurmctld, slurmd and munge, a one-node cluster
on loopback that this test starts and stops, inside the site root
(tools/torch-roots), never on the host. The 2-rank job runs through `srun`
and through an `sbatch` script that loads the module; each rank takes its
local rank from SLURM_LOCALID and its rank from SLURM_PROCID (no LOCAL_RANK
or RANK is set); `fsdpskip report` passes over the job's reports.

  FSDPSKIP_BUILD_DIR  the host's build tree (the checkout is mounted at its own path)
"""
import glob
import json
import os
import socket
import subprocess
import sys
import time

import pytest

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(SOURCE, "tools", "workloads"))
from launch import free_port  # noqa: E402
from policy_variables import without_policy  # noqa: E402

BUILD = os.environ["FSDPSKIP_BUILD_DIR"]
LOAD_MODEL = os.path.join(SOURCE, "tools", "workloads", "load_model.py")
LMOD_INIT = "/usr/share/lmod/lmod/init/bash"
JOB = [LOAD_MODEL, "--size", "tiny", "--sync", "broadcast", "--verify"]


class Cluster:
    """munged, slurmctld and slurmd in the foreground, with every file under `base`."""

    def __init__(self, base):
        self.base = base
        self.host = socket.gethostname()
        for sub in ("munge", "ctld", "d", "log"):
            os.makedirs(os.path.join(base, sub), mode=0o700, exist_ok=True)
        self.socket = os.path.join(base, "munge", "munge.socket")
        self.conf = os.path.join(base, "slurm.conf")
        key = os.path.join(base, "munge", "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        with open(self.conf, "w") as f:
            f.write("\n".join([
                "ClusterName=fsdpskip",
                "SlurmctldHost=%s(127.0.0.1)" % self.host,
                "SlurmUser=root",
                "SlurmctldPort=%d" % free_port(),
                "SlurmdPort=%d" % free_port(),
                "AuthType=auth/munge",
                "CredType=cred/munge",
                "AuthInfo=socket=%s" % self.socket,
                "StateSaveLocation=%s" % os.path.join(base, "ctld"),
                "SlurmdSpoolDir=%s" % os.path.join(base, "d"),
                "SlurmctldPidFile=%s" % os.path.join(base, "ctld.pid"),
                "SlurmdPidFile=%s" % os.path.join(base, "d.pid"),
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "JobAcctGatherType=jobacct_gather/none",
                "MpiDefault=none",
                "SchedulerType=sched/builtin",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_Core",
                "ReturnToService=2",
                "NodeName=%s NodeAddr=127.0.0.1 CPUs=%d State=UNKNOWN" % (self.host, os.cpu_count()),
                "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
                ""]))
        self.env = without_policy(os.environ)
        self.env["SLURM_CONF"] = self.conf
        log = lambda name: open(os.path.join(base, "log", name), "w")  # noqa: E731
        self.daemons = [
            subprocess.Popen(["munged", "--foreground", "--force", "--key-file=" + key, "--socket=" + self.socket,
                              "--pid-file=" + os.path.join(base, "munge", "munged.pid"),
                              "--seed-file=" + os.path.join(base, "munge", "seed"),
                              "--log-file=" + os.path.join(base, "log", "munged.log")],
                             stdout=log("munged.out"), stderr=subprocess.STDOUT)]
        self.wait_for(lambda: os.path.exists(self.socket), "munged's socket")
        for daemon in ("slurmctld", "slurmd"):
            self.daemons.append(subprocess.Popen([daemon, "-D", "-f", self.conf, "-L",
                                                  os.path.join(base, "log", daemon + ".log")],
                                                 env=self.env, stdout=log(daemon + ".out"), stderr=subprocess.STDOUT))
        self.wait_for(lambda: self.client(["sinfo", "-h", "-o", "%T"]).stdout.strip() == "idle", "an idle node")

    def wait_for(self, ready, what, seconds=90):
        deadline = time.monotonic() + seconds
        while not ready():
            if time.monotonic() > deadline or any(d.poll() is not None for d in self.daemons):
                pytest.fail("no %s: %s" % (what, self.logs()))
            time.sleep(0.5)

    def logs(self):
        text = ""
        for path in sorted(glob.glob(os.path.join(self.base, "log", "*"))):
            with open(path, errors="replace") as f:
                text += "\n--- %s\n%s" % (path, f.read()[-2000:])
        return text

    def client(self, argv, timeout=600, **variables):
        env = dict(self.env, **variables)
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)

    def stop(self):
        for daemon in reversed(self.daemons):
            daemon.terminate()
            try:
                daemon.wait(timeout=30)
            except subprocess.TimeoutExpired:
                daemon.kill()


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    prefix = str(tmp_path_factory.mktemp("install") / "fsdpskip")
    done = subprocess.run(["cmake", "--install", BUILD, "--prefix", prefix], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return prefix


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = Cluster(str(tmp_path_factory.mktemp("slurm")))
    yield cluster
    cluster.stop()


def check_job(cluster, prefix, out, reports, done):
    """Both ranks equal to rank 0 after the sync; rank 1 (local rank 1 from
    SLURM_LOCALID) skipped and reported; `fsdpskip report` passes."""
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:] + cluster.logs()
    ranks = [json.load(open(os.path.join(out, "rank%d.json" % r))) for r in (0, 1)]
    assert [r["local_rank"] for r in ranks] == [0, 1]
    assert all(r["equal_to_rank0"] and r["all_finite"] for r in ranks), ranks
    written = sorted(glob.glob(os.path.join(reports, "*.json")))
    assert len(written) == 1, written  # local rank 0 reads the checkpoint: inactive, no report
    report = json.load(open(written[0]))
    assert (report["rank"], report["local_rank"]) == (1, 1) and report["storages_skipped"] > 0, report
    verdict = cluster.client([prefix + "/bin/fsdpskip", "report", reports])
    assert verdict.returncode == 0 and "pass" in verdict.stdout, verdict.stdout + verdict.stderr
    return verdict.stdout


def directories(tmp_path):
    out, reports = str(tmp_path / "out"), str(tmp_path / "reports")
    os.makedirs(out)
    os.makedirs(reports)
    return out, reports


def test_srun_runs_the_job_under_fsdpskip(cluster, prefix, tmp_path):
    out, reports = directories(tmp_path)
    done = cluster.client(["srun", "--ntasks", "2", "--nodes", "1", "--kill-on-bad-exit=1",
                           prefix + "/bin/fsdpskip", "run", "--mode", "on", "--report", reports + "/%j-%r.json", "--",
                           "python3"] + JOB + ["--out", out],
                          MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    print(check_job(cluster, prefix, out, reports, done))
    assert os.path.basename(glob.glob(reports + "/*.json")[0]).split("-")[0].isdigit(), "%j is the Slurm job id"


def test_sbatch_script_loads_the_module_and_runs_srun(cluster, prefix, tmp_path):
    out, reports = directories(tmp_path)
    script = tmp_path / "job.sh"
    script.write_text("\n".join([
        "#!/bin/bash",
        "#SBATCH --ntasks=2 --nodes=1 --output=%s" % (tmp_path / "job.out"),
        "set -eu",
        "source %s" % LMOD_INIT,
        "module use %s/share/modulefiles/lmod" % prefix,
        "module load fsdpskip",
        "export MASTER_ADDR=127.0.0.1 MASTER_PORT=%d" % free_port(),
        "srun --kill-on-bad-exit=1 fsdpskip run --mode on --report %s/%%j-%%r.json -- python3 %s --out %s"
        % (reports, " ".join(JOB), out),
        ""]))
    done = cluster.client(["sbatch", "--wait", str(script)])
    job_out = (tmp_path / "job.out").read_text() if (tmp_path / "job.out").exists() else ""
    done.stdout += job_out
    print(check_job(cluster, prefix, out, reports, done))
