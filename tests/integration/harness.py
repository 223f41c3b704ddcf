"""Helpers for the integration tests: run real programs with and without the
preload and hand back what they printed. Paths come from ctest's environment."""
import json
import os
import socket
import subprocess

PRELOAD = os.environ["FSDPSKIP_PRELOAD"]
PLUGIN = os.environ["FSDPSKIP_PLUGIN_FILE"]
SOURCE_DIR = os.environ["FSDPSKIP_SOURCE_DIR"]
PYTHON = "/usr/bin/python3"  # Debian's, with python3-torch; the first on PATH may lack torch
HERE = os.path.dirname(os.path.abspath(__file__))
LOAD_MODEL = os.path.join(SOURCE_DIR, "tools", "workloads", "load_model.py")

# Variables that would change fsdpskip's decision, removed from every run.
_OURS = ("FSDPSKIP", "FSDPSKIP_LOCAL_RANK", "FSDPSKIP_LOG", "FSDPSKIP_REPORT", "FSDPSKIP_PLUGIN", "LOCAL_RANK",
         "RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PALS_LOCAL_RANKID",
         "ACCELERATE_USE_FSDP", "FSDP_CPU_RAM_EFFICIENT_LOADING", "LD_PRELOAD")


def environment(preload, **variables):
    env = {k: v for k, v in os.environ.items() if k not in _OURS}
    if preload:
        env["LD_PRELOAD"] = PRELOAD
    env.update({k: str(v) for k, v in variables.items()})
    return env


def run(command, preload=True, timeout=600, input=None, **variables):
    """Runs a command; returns the CompletedProcess (text mode)."""
    return subprocess.run(command, env=environment(preload, **variables), capture_output=True, text=True,
                          timeout=timeout, input=input)


def fsdpskip_lines(stderr):
    return [line for line in stderr.splitlines() if "fsdpskip:" in line]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun_can_start():
    """torchrun's agent makes its TCPStore without consulting USE_LIBUV; a
    torch built without libuv (Debian's 2.x) cannot start it at all."""
    probe = ("import torch.distributed as d, datetime; "
             "d.TCPStore('127.0.0.1', 0, 1, True, datetime.timedelta(seconds=5), multi_tenant=True)")
    return run([PYTHON, "-c", probe], preload=False).returncode == 0


TORCHRUN_CAN_START = _torchrun_can_start()


def _launch_ranks(script_args, nproc, preload, timeout, variables):
    """Starts the ranks as torchrun would (same variables, same [default<rank>]:
    prefixes on their output) where torchrun itself cannot start."""
    port = free_port()
    workers = []
    for rank in range(nproc):
        env = environment(preload, RANK=rank, LOCAL_RANK=rank, WORLD_SIZE=nproc, LOCAL_WORLD_SIZE=nproc,
                          GROUP_RANK=0, MASTER_ADDR="127.0.0.1", MASTER_PORT=port, OMP_NUM_THREADS=1,
                          **variables)
        workers.append(subprocess.Popen([PYTHON] + script_args, env=env, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True))
    stdout, stderr, status = [], [], 0
    for rank, worker in enumerate(workers):
        out, err = worker.communicate(timeout=timeout)
        stdout += ["[default%d]:%s" % (rank, line) for line in out.splitlines()]
        stderr += ["[default%d]:%s" % (rank, line) for line in err.splitlines()]
        status = status or worker.returncode
    return subprocess.CompletedProcess(script_args, status, "\n".join(stdout) + "\n", "\n".join(stderr) + "\n")


def torchrun(script_args, out_dir, nproc=2, preload=True, timeout=900, **variables):
    """A real multi-process job on loopback; returns (completed process, [rank JSON...])."""
    variables.setdefault("USE_LIBUV", "0")  # torch >= 2.4 built without libuv
    if TORCHRUN_CAN_START:
        # torch 1.13 on Python 3.11: torchrun crashes parsing its log-redirect
        # flags unless they are given explicitly.
        command = [PYTHON, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc), "--redirects", "2",
                   "--tee", "2", "--master_addr", "127.0.0.1", "--master_port", str(free_port())] + script_args
        done = run(command, preload=preload, timeout=timeout, **variables)
    else:
        done = _launch_ranks(script_args, nproc, preload, timeout, variables)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ranks = []
    for rank in range(nproc):
        path = os.path.join(out_dir, "rank%d.json" % rank)
        if os.path.exists(path):
            with open(path) as f:
                ranks.append(json.load(f))
    return done, ranks


def rank_lines(done, rank):
    """A worker's lines from a torchrun job: --tee copies them, prefixed with
    [default<rank>]:, to the agent's stdout and stderr."""
    prefix = "[default%d]:" % rank
    return [line[len(prefix):] for line in (done.stdout + done.stderr).splitlines() if line.startswith(prefix)]
