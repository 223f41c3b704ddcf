"""Jobs whose sync sources are not local rank 0: the data-parallel groups of
tensor parallelism ({0, 2} and {1, 3}: global rank 1, local rank 1, is a
source), a broadcast from rank 1, Megatron's master-weight init. Each rank
seeds with its own rank, so that each source's values are its own; and two
nodes of two ranks. Every
rank ends bitwise as in the run without fsdpskip: a receiving rank skips
and receives, a source replays what it skipped before it sends; where a
skipped value cannot be given back, the source stops before the collective
with exit status 3. A skipped value never leaves its rank."""
import json
import os
import re
import socket

import pytest
import torch

from harness import (COMMAND, LOAD_MODEL, environment, rank_lines, require, run, said_by_fsdpskip, summary_lines,
                     torchrun)
import launch  # tools/workloads, put on the path by harness

# Every test here runs against every torch, but the two nodes in network
# namespaces of their own: the host's suite alone (root, and `ip` on the
# machine), since what they add is the network, not the torch.


def job(tmp_path, *args, nproc, preload=True, **variables):
    out = tmp_path / ("out-%d" % len(list(tmp_path.iterdir())))
    out.mkdir()
    done, ranks = torchrun([LOAD_MODEL, "--out", str(out)] + list(args), str(out), nproc=nproc, preload=preload,
                           **variables)
    assert len(ranks) == nproc, done.stdout[-2000:] + done.stderr[-2000:]
    return done, {result["rank"]: result for result in ranks}


def summary(done, rank, local_rank=None):
    lines = summary_lines("\n".join(rank_lines(done, rank)), rank if local_rank is None else local_rank)
    assert len(lines) == 1, "\n".join(rank_lines(done, rank))[-3000:]
    return lines[0]


def count(line, what):
    found = re.search(what + r" (\d+)", line)
    return int(found.group(1)) if found else 0


def assert_as_without_fsdpskip(plain, ranks):
    for rank, result in plain.items():
        assert ranks[rank]["digests"] == result["digests"], "rank %d's parameters differ from the run without" % rank
        assert ranks[rank]["rng_after_sync"] == result["rng_after_sync"], "rank %d's generator" % rank


def assert_source_replayed(done, rank):
    line = summary(done, rank)
    assert count(line, "materialized") > 0 and count(line, "pending") == 0 and count(line, "overwrite") == 0, line
    assert count(line, "materialized") == count(line, "on"), line  # every skipped storage was sent


def assert_receiver_skipped(done, rank, local_rank=None):
    line = summary(done, rank, local_rank)
    assert count(line, "overwrite") > 0 and count(line, "pending") == 0 and count(line, "materialized") == 0, line


@pytest.mark.every_torch
@pytest.mark.parametrize("sync", ["broadcast", "ddp"])
def test_tensor_parallel_data_parallel_groups_end_as_without_fsdpskip(tmp_path, sync):
    """Four ranks, the data-parallel groups of 2-way tensor parallelism:
    {0, 2} synced from rank 0, {1, 3} from rank 1. One broadcast per
    parameter (DeepSpeed's _broadcast_model) or DDP(process_group=...) (a
    coalesced broadcast of flattened buckets). Ranks 2 and 3 skip and
    receive; rank 1 replays what it skipped before it sends."""
    args = ("--size", "tiny", "--style", "hf4", "--groups", "2", "--sync", sync, "--seed-per-rank", "--verify")
    _, plain = job(tmp_path, *args, nproc=4, preload=False)
    assert plain[2]["digests"] == plain[0]["digests"] and plain[3]["digests"] == plain[1]["digests"]
    assert plain[1]["digests"] != plain[0]["digests"]
    done, ranks = job(tmp_path, *args, nproc=4, FSDPSKIP="on")
    assert_as_without_fsdpskip(plain, ranks)
    assert_source_replayed(done, 1)
    assert_receiver_skipped(done, 2)
    assert_receiver_skipped(done, 3)


@pytest.mark.every_torch
def test_a_broadcast_from_rank1_ends_as_without_fsdpskip(tmp_path):
    """Two ranks, dist.broadcast(p, src=1) per parameter: rank 1, local rank
    1, is the source. It replays its skipped inits (normal_, zero_, fill_)
    before each parameter leaves, so rank 0 receives rank 1's own values."""
    args = ("--size", "tiny", "--style", "torch", "--sync", "broadcast", "--source", "1", "--seed-per-rank",
            "--verify")
    _, plain = job(tmp_path, *args, nproc=2, preload=False)
    done, ranks = job(tmp_path, *args, nproc=2, FSDPSKIP="on")
    assert_as_without_fsdpskip(plain, ranks)
    assert_source_replayed(done, 1)
    assert said_by_fsdpskip(rank_lines(done, 0)) == [], "rank 0 prints nothing"


@pytest.mark.every_torch
def test_megatrons_master_weight_then_slice_ends_as_without_fsdpskip(tmp_path):
    """Megatron's CPU init: every rank initialises a full master weight (not
    a parameter: it runs) and copies its tensor-parallel slice into its
    parameter with cat(out=); then the data-parallel groups sync."""
    args = ("--size", "tiny", "--style", "megatron", "--groups", "2", "--sync", "broadcast", "--seed-per-rank",
            "--verify")
    _, plain = job(tmp_path, *args, nproc=4, preload=False)
    done, ranks = job(tmp_path, *args, nproc=4, FSDPSKIP="on")
    assert_as_without_fsdpskip(plain, ranks)
    for rank in (2, 3):  # their 1-D parameters' inits, under a page each, ran
        assert not any("pending storage" in line for line in rank_lines(done, rank)), rank_lines(done, rank)


@pytest.mark.every_torch
def test_a_trunc_normal_source_ends_as_without_fsdpskip(tmp_path):
    """trunc_normal_ on a source, which then sends its own values to rank 0.
    Up to torch 2.11 its later steps (erfinv_, mul_, add_, clamp_) join the
    recipe, which the source replays before it sends; from 2.12 its
    rejection test reads its draws at once, so they run (nothing is
    skipped: the summary is at debug level). Either way every value is the
    one without fsdpskip."""
    import inspect
    chain = "erfinv" in inspect.getsource(torch.nn.init._no_grad_trunc_normal_)
    args = ("--size", "tiny", "--style", "trunc", "--sync", "broadcast", "--source", "1", "--seed-per-rank",
            "--verify")
    _, plain = job(tmp_path, *args, nproc=2, preload=False)
    done, ranks = job(tmp_path, *args, nproc=2, FSDPSKIP="on", FSDPSKIP_LOG="summary" if chain else "debug")
    assert_as_without_fsdpskip(plain, ranks)
    line = summary(done, 1)
    assert count(line, "pending") == 0, line
    if chain:
        assert count(line, "materialized") > 0 and "erfinv_" in line, line
    else:
        assert "materialized" not in line and "normal_" not in line, line
    assert not any("error:" in l for l in said_by_fsdpskip(rank_lines(done, 1))), rank_lines(done, 1)


@pytest.mark.every_torch("loopback")
@pytest.mark.parametrize("network", ["loopback", "namespaces"])
def test_two_nodes_sync_from_rank0_and_every_expected_rank_reports(tmp_path, network):
    """torchrun --nnodes 2 --nproc_per_node 2 as two agents, DDP's sync from
    global rank 0: on loopback (one machine, so one host name for both
    nodes), or each node in a network namespace of its own, joined by a
    veth pair, under a host name of its own (launch.NetworkNodes; root).
    Node 1's local rank 0 (global rank 2) stays inactive and receives; each
    node's local rank 1 skips and receives. Their reports, named %h-%r,
    come from both nodes, and `fsdpskip report` over them finds every rank
    it expects (local ranks >= 1: ranks 1 and 3) and passes."""
    out, reports = tmp_path / "out", tmp_path / "reports"
    out.mkdir()
    args = [LOAD_MODEL, "--out", str(out), "--size", "tiny", "--style", "hf4", "--sync", "ddp", "--seed-per-rank",
            "--verify"]
    variables = environment(True, FSDPSKIP="on", FSDPSKIP_REPORT=str(reports / "%h-%r.json"))
    if network == "namespaces":
        require("root", os.geteuid() == 0, "makes network namespaces: needs root")
        with launch.NetworkNodes() as nodes:
            done = launch.run_nodes(args, variables, timeout=600, network=nodes)
        expected_names = ["%s-%d.json" % (host, rank) for host, rank in zip(nodes.hostnames, (1, 3))]
    else:
        done = launch.run_nodes(args, variables, timeout=600)
        expected_names = ["%s-%d.json" % (socket.gethostname(), rank) for rank in (1, 3)]
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ranks = {rank: json.loads((out / ("rank%d.json" % rank)).read_text()) for rank in range(4)}
    assert [ranks[rank]["local_rank"] for rank in range(4)] == [0, 1, 0, 1]
    assert all(ranks[rank]["equal_to_rank0"] and ranks[rank]["all_finite"] for rank in range(4))
    for rank in (1, 3):
        assert_receiver_skipped(done, rank, local_rank=1)
    assert said_by_fsdpskip(rank_lines(done, 2)) == [], "node 1's local rank 0 is inactive"
    assert sorted(os.listdir(str(reports))) == expected_names
    gathered = json.loads(run([COMMAND, "report", "--json", str(reports)], preload=False).stdout)
    assert gathered["verdict"] == "pass", gathered
    assert gathered["totals"]["expected_reports"] == 2 and gathered["totals"]["missing_ranks"] == [], gathered


@pytest.mark.every_torch
@pytest.mark.skipif(tuple(int(v) for v in torch.__version__.split(".")[:2]) < (2, 6), reason="FSDP2 from torch 2.6")
def test_hybrid_sharding_on_a_2d_mesh_ends_as_without_fsdpskip(tmp_path):
    """FSDP2 on a replicate x shard mesh of four ranks: rank 0's values
    broadcast (broadcast_from_rank0), then distribute_tensor broadcasts over
    each replicate group from its first rank (global rank 1 roots {1, 3})
    and scatters over each shard group: the sources send received values,
    never skipped ones. Every rank's shards end as without fsdpskip; ranks 1
    to 3 skipped their inits."""
    args = ("--size", "tiny", "--style", "hf4", "--sync", "hsdp", "--verify")
    _, plain = job(tmp_path, *args, nproc=4, preload=False)
    done, ranks = job(tmp_path, *args, nproc=4, FSDPSKIP="on")
    for rank in range(4):
        assert ranks[rank]["digests"] == plain[rank]["digests"], rank
        assert ranks[rank]["equal_to_rank0"] and ranks[rank]["all_finite"], rank
    for rank in (1, 2, 3):
        line = summary(done, rank)
        assert count(line, "skipped") > 0 and count(line, "pending") == 0 and count(line, "materialized") == 0, line
