"""Starts an N-rank job on loopback as torchrun does, for the demo, the
benchmarks and the tests alike.

torchrun is used where it can start. Two facts of Debian's builds shape
this: torch 1.13 on Python 3.11 crashes parsing torchrun's log-redirect flags
unless they are given explicitly; torch 2.x is built without libuv, and
torchrun's agent makes its TCPStore without consulting USE_LIBUV, so it cannot
start at all. There the ranks are started directly with torchrun's own
variables, and their output lines get torchrun's [default<rank>]: prefixes.
"""
import os
import re
import socket
import subprocess
import threading
import time

# Debian's, with python3-torch (the first python3 on PATH may lack torch), or
# the one the tests name (a venv with PyPI's torch: tools/pip-venv).
PYTHON = os.environ.get("FSDPSKIP_PYTHON", "/usr/bin/python3")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun_can_start(env):
    probe = ("import torch.distributed as d, datetime; "
             "d.TCPStore('127.0.0.1', 0, 1, True, datetime.timedelta(seconds=5), multi_tenant=True)")
    return subprocess.run([PYTHON, "-c", probe], env=env, capture_output=True).returncode == 0


_can_start = None


def torchrun_agent_can_start(env):
    """Whether torchrun's agent starts with this Python's torch (not on
    Debian's libuv-less torch 2.x builds); asked once."""
    global _can_start
    if _can_start is None:
        _can_start = _torchrun_can_start({k: v for k, v in env.items() if k != "LD_PRELOAD"})
    return _can_start


# torch 2.15 can abort a rank while its interpreter exits, after the job's
# work is done, with or without fsdpskip and even after
# destroy_process_group(): DDP's reducer, in a reference cycle, keeps the
# gloo group alive until finalization's garbage collection, and a gloo worker
# that only then drops its last all-reduce (whose thread-local state holds the
# Python context backward stashed) takes the GIL of a finalizing interpreter,
# and its thread exits through a noexcept destructor (a core's backtrace:
# ProcessGroupGloo::runLoop, ~AsyncAllreduceWork, ~ThreadLocalState,
# SafePyObject decref, PyThread_exit_thread; the mechanism of pytorch
# #179291). Collecting that cycle earlier turns the abort into a hang: the
# group's destructor would join that worker while holding the GIL. Seen here
# in 10 of 52 DDP training jobs run two at a time (as ctest -j2 runs them),
# 0 of 40 run alone. torch 2.6, whose group the ranks leave undestroyed
# (end_rank), has a twin: a gloo worker that drops a tensor with a Python
# object while the interpreter finalizes segfaults taking its GIL
# (ProcessGroupGloo::runLoop, ~TensorImpl, PyObjectSlot::maybe_destroy_pyobj,
# _PyThreadState_NewBound; no fsdpskip frame), seen once, in an FSDP2 job of
# a run on a new machine (2026-12-04), its backtrace printed by UCX's signal
# handler (libucs, which Debian's torch loads; where nothing prints one, the
# crash is not recognised and stands). Such a job is run again, twice at
# most: its outcome is what it did, not that crash. Any other failure stands.
# Each race by the lines its output has, all of them.
TORCH_EXIT_RACES = (("terminate called without an active exception",),
                    ("Caught signal 11", "PyObjectSlot19maybe_destroy_pyobj", "ProcessGroupGloo7runLoop"))
TORCH_EXIT_RERUNS = 2


def ended_in_torch_exit_race(output):
    return any(all(line in output for line in race) for race in TORCH_EXIT_RACES)


# What every torchrun agent here is given: each rank's stderr into its
# output, prefixed; and its workers checked every 0.1 s, torch 2's default,
# where torch 1.13's 5 s keep a job of a few seconds waiting, after its ranks
# ended, for the agent to notice.
AGENT_OPTIONS = ["--monitor_interval", "0.1", "--redirects", "2", "--tee", "2"]


def run(script_args, env, nproc=2, timeout=None, prefix=(), agent=True):
    """Runs `python script_args...` on nproc ranks; returns a CompletedProcess
    whose stdout and stderr carry each rank's lines prefixed [default<rank>]:.
    With `agent`, through torchrun's agent where it can start; without, the
    ranks are started directly. `prefix` goes before the launcher (`fsdpskip
    run --`), or before each rank where ranks are started directly, as srun
    would."""
    return _past_torch_exit_races(lambda: _run_once(script_args, env, nproc, timeout, prefix, agent))


def _past_torch_exit_races(run_once):
    """run_once(), again while it ended in one of TORCH_EXIT_RACES, twice at most."""
    done = run_once()
    for _ in range(TORCH_EXIT_RERUNS):
        if done.returncode == 0 or not ended_in_torch_exit_race(done.stdout + done.stderr):
            break
        done = run_once()
    return done


def _run_once(script_args, env, nproc, timeout, prefix, agent):
    env = dict(env, USE_LIBUV=env.get("USE_LIBUV", "0"))
    if agent and torchrun_agent_can_start(env):
        command = [PYTHON, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc)] + AGENT_OPTIONS + [
                   "--master_addr", "127.0.0.1", "--master_port", str(free_port())] + script_args
        return subprocess.run(list(prefix) + command, env=env, capture_output=True, text=True, timeout=timeout)
    port = free_port()
    workers = []
    for rank in range(nproc):
        rank_env = dict(env, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(nproc),
                        LOCAL_WORLD_SIZE=str(nproc), GROUP_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                        OMP_NUM_THREADS="1")
        workers.append(subprocess.Popen(list(prefix) + [PYTHON] + script_args, env=rank_env, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True))
    return _gathered(script_args, workers, timeout)


def run_nodes(script_args, env, nodes=2, nproc_per_node=2, timeout=None, network=None):
    """A job of `nodes` nodes of `nproc_per_node` ranks on this machine, as
    a multi-node job starts it: one torchrun agent per node (--nnodes,
    --node_rank, static rendezvous at the first node), or, where torchrun's
    agent cannot start, each node's ranks with the variables it would give
    them. Without `network` every node is this machine, on loopback, with
    its host name; with one (NetworkNodes) each node runs in its own
    network and has its own host name. Returns a CompletedProcess whose
    stdout and stderr carry each rank's lines prefixed [default<global
    rank>]:."""
    return _past_torch_exit_races(lambda: _run_nodes_once(script_args, env, nodes, nproc_per_node, timeout,
                                                           network))


class NetworkNodes:
    """Two nodes on this machine, each with a network and a host name of its
    own: a network namespace per node (ip netns), joined by a veth pair
    whose two ends have one name, so that gloo is told its interface
    (GLOO_SOCKET_IFNAME) alike on both, and a UTS namespace per node's
    processes for its host name. A context manager; needs root."""
    INTERFACE = "fsdpskip0"

    def __init__(self):
        self.tag = os.getpid() % 100000  # this job's namespaces and interfaces apart from another's
        self.namespaces = ["fsdpskip-node%d-%d" % (node, self.tag) for node in range(2)]
        self.addresses = ["10.213.%d.%d" % (self.tag % 250, node + 1) for node in range(2)]
        self.hostnames = ["fsdpskip-node%d" % node for node in range(2)]

    def __enter__(self):
        ends = ["fsa%d" % self.tag, "fsb%d" % self.tag]
        try:
            for namespace in self.namespaces:
                _ip("netns", "add", namespace)
            _ip("link", "add", ends[0], "type", "veth", "peer", "name", ends[1])
            for namespace, end, address in zip(self.namespaces, ends, self.addresses):
                _ip("link", "set", end, "netns", namespace)
                _ip("-n", namespace, "link", "set", end, "name", self.INTERFACE)
                _ip("-n", namespace, "addr", "add", address + "/24", "dev", self.INTERFACE)
                _ip("-n", namespace, "link", "set", self.INTERFACE, "up")
                _ip("-n", namespace, "link", "set", "lo", "up")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *_):
        for namespace in self.namespaces:  # the veth pair goes with them
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True)

    def prefix(self, node):
        """The command words that run a program as node `node`: in its network, under its host name."""
        return ["ip", "netns", "exec", self.namespaces[node], "unshare", "--uts", "--", "sh", "-c",
                'hostname "$0" && exec "$@"', self.hostnames[node]]


def _ip(*args):
    done = subprocess.run(["ip"] + list(args), capture_output=True, text=True)
    if done.returncode != 0:
        raise OSError("ip %s: %s" % (" ".join(args), done.stderr.strip()))


def _run_nodes_once(script_args, env, nodes, nproc_per_node, timeout, network):
    port = free_port()
    world = nodes * nproc_per_node
    env = dict(env, USE_LIBUV=env.get("USE_LIBUV", "0"))
    master = network.addresses[0] if network else "127.0.0.1"
    if network:
        env["GLOO_SOCKET_IFNAME"] = network.INTERFACE

    def prefix(node):
        return network.prefix(node) if network else []
    if torchrun_agent_can_start(env):
        agents = [subprocess.Popen(
            prefix(node) + [PYTHON, "-m", "torch.distributed.run", "--nnodes", str(nodes), "--node_rank", str(node),
                            "--nproc_per_node", str(nproc_per_node)] + AGENT_OPTIONS +
            ["--master_addr", master, "--master_port", str(port)] + script_args,
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for node in range(nodes)]
        outputs, ended = _until_one_fails(agents, timeout)
        status = _status(agents, ended)

        def global_prefixes(text, node):  # an agent prefixes its node's local ranks
            return re.sub(r"\[default(\d+)\]:", lambda m: "[default%d]:" % (node * nproc_per_node + int(m.group(1))),
                          text)
        stdout = "".join(global_prefixes(out, node) for node, (out, _) in enumerate(outputs))
        stderr = "".join(global_prefixes(err, node) for node, (_, err) in enumerate(outputs))
        return subprocess.CompletedProcess(script_args, status, stdout, stderr)
    workers = []
    for rank in range(world):
        rank_env = dict(env, RANK=str(rank), LOCAL_RANK=str(rank % nproc_per_node), WORLD_SIZE=str(world),
                        LOCAL_WORLD_SIZE=str(nproc_per_node), GROUP_RANK=str(rank // nproc_per_node),
                        MASTER_ADDR=master, MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        workers.append(subprocess.Popen(prefix(rank // nproc_per_node) + [PYTHON] + script_args, env=rank_env,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return _gathered(script_args, workers, timeout)


READER_GRACE = 30  # s a killed job's output may still take to arrive


def _until_one_fails(processes, timeout):
    """Each process's (stdout, stderr), read as they run, and the processes
    ended here. One that fails ends the others, as torchrun's agent ends a
    job's workers: an agent would otherwise wait 300 s for its peer at the
    job's final barrier, and a rank at its collective for gloo's timeout."""
    outputs, ended, errors = [None] * len(processes), [], []

    def read(index):
        try:
            outputs[index] = processes[index].communicate()
        except BaseException as error:  # raised again by the caller, not lost with this thread
            errors.append(error)
    # Daemons: past a timeout, a reader may wait on a pipe that a process
    # the kill did not reach holds (an agent's orphaned worker).
    readers = [threading.Thread(target=read, args=(index,), daemon=True) for index in range(len(processes))]
    for reader in readers:
        reader.start()
    deadline = None if timeout is None else time.monotonic() + timeout
    while any(reader.is_alive() for reader in readers):
        failed = any(process.returncode not in (None, 0) for process in processes)
        late = deadline is not None and time.monotonic() > deadline
        if failed or late:
            for process in processes:
                if process.returncode is None:
                    process.kill() if late else process.terminate()
                    ended.append(process)
            ended_output = _joined(readers, READER_GRACE)
            if late:
                raise subprocess.TimeoutExpired(processes[0].args, timeout)
            if not ended_output:  # terminated, yet still going
                for process in ended:
                    process.kill()
                if not _joined(readers, READER_GRACE):
                    raise RuntimeError("a job's output did not end after its processes were killed: a process "
                                       "they started holds it")
            break
        time.sleep(0.2)
    if errors:
        raise errors[0]
    return outputs, ended


def _joined(threads, seconds):
    """Whether every thread ended within `seconds` in all."""
    until = time.monotonic() + seconds
    for thread in threads:
        thread.join(max(0.0, until - time.monotonic()))
    return not any(thread.is_alive() for thread in threads)


def _status(processes, ended):
    """The status of a process that failed of itself, not of one ended for it."""
    return next((process.returncode for process in processes if process.returncode and process not in ended),
                next((process.returncode for process in processes if process.returncode), 0))


def _gathered(script_args, workers, timeout):
    outputs, ended = _until_one_fails(workers, timeout)
    stdout, stderr = [], []
    for rank, (out, err) in enumerate(outputs):
        stdout += ["[default%d]:%s" % (rank, line) for line in out.splitlines()]
        stderr += ["[default%d]:%s" % (rank, line) for line in err.splitlines()]
    return subprocess.CompletedProcess(script_args, _status(workers, ended), "\n".join(stdout) + "\n",
                                       "\n".join(stderr) + "\n")


def end_rank():
    """What a rank of these jobs does last, once it has written its results:
    the process group destroyed from torch 2.7 on (on 2.6 destroy can hang
    once the peer has gone), so that as little as possible is left to the
    interpreter's exit (see TORCH_EXIT_RACES)."""
    import torch
    import torch.distributed as dist
    dist.barrier()
    if tuple(int(part) for part in torch.__version__.split(".")[:2]) >= (2, 7):
        dist.destroy_process_group()


if __name__ == "__main__":
    # launch.py [--nproc N] -- SCRIPT ARGS...: for shell scripts (the module tests).
    import argparse
    import sys
    parser = argparse.ArgumentParser(description="run SCRIPT on N ranks on loopback")
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("script", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    script = args.script[1:] if args.script[:1] == ["--"] else args.script
    done = run(script, dict(os.environ), nproc=args.nproc, timeout=600)
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    sys.exit(done.returncode)

