"""Cost of each torch.nn.init function on one parameter, without fsdpskip and
on a skipping rank (LD_PRELOAD, LOCAL_RANK=1, FSDPSKIP=on), each measured in
a fresh process: wall time and peak RSS growth (VmHWM) of the call, and the
targets (a skipping rank's time and RSS growth <= 2% of the unpatched call's
time and of the parameter's bytes) met or not.

    PYTHON tools/bench/init_costs.py --build BUILD [--elements N ...] [--inits NAME ...]

PYTHON is the one whose torch BUILD was built against.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "workloads"))
from measure import measured  # noqa: E402
from policy_variables import without_policy  # noqa: E402

INITS = ["normal_", "uniform_", "constant_", "ones_", "zeros_", "xavier_uniform_", "xavier_normal_",
         "kaiming_uniform_", "kaiming_normal_", "trunc_normal_", "eye_", "dirac_", "orthogonal_", "sparse_"]


# orthogonal_ is a QR factorisation: at 16M elements it takes over a minute.
ELEMENTS = {"orthogonal_": 1 << 20}


def shape_of(name, elements):
    side = int(elements ** 0.5)
    return (side // 16, side // 16, 16, 16) if name == "dirac_" else (side, side)


def measure(name, elements):
    import torch
    import torch.nn as nn
    torch.set_num_threads(1)
    init = getattr(nn.init, name)
    args = {"constant_": (0.5,), "sparse_": (0.9,)}.get(name, ())
    # One small call first: what a process pays once (libraries' first use)
    # is not what each parameter costs.
    init(nn.Parameter(torch.empty(*shape_of(name, 4096))), *args)
    param = nn.Parameter(torch.empty(*shape_of(name, elements)))
    _, seconds, growth = measured(lambda: init(param, *args))
    return {"seconds": seconds, "rss_growth_bytes": growth, "param_bytes": param.numel() * param.element_size()}


def run(name, elements, preload):
    env = without_policy(os.environ)
    if preload:
        env.update(LD_PRELOAD=preload, LOCAL_RANK="1", FSDPSKIP="on", FSDPSKIP_LOG="quiet")
    elements = ELEMENTS.get(name, elements)
    done = subprocess.run([sys.executable, __file__, "--one", name, "--elements", str(elements)], env=env,
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--build", default="build")
    parser.add_argument("--elements", type=int, nargs="+", default=[16 << 20])
    parser.add_argument("--inits", nargs="+", default=INITS, choices=INITS)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--one")
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.elements[0])))
        return
    import torch
    preload = os.path.abspath(os.path.join(args.build, "lib", "libfsdpskip.so"))
    print("torch %s, one fp32 parameter, median of %d runs, one thread" % (torch.__version__, args.repetitions))
    print()
    print("| init | parameter | time without | time with | ratio | peak RSS growth without | with (of the parameter) "
          "| targets met |")
    print("|---|---|---|---|---|---|---|---|")
    for elements in args.elements:
        for name in args.inits:
            plain = [run(name, elements, None) for _ in range(args.repetitions)]
            skip = [run(name, elements, preload) for _ in range(args.repetitions)]
            t0 = statistics.median(r["seconds"] for r in plain)
            t1 = statistics.median(r["seconds"] for r in skip)
            m0 = statistics.median(r["rss_growth_bytes"] for r in plain)
            m1 = statistics.median(r["rss_growth_bytes"] for r in skip)
            size = plain[0]["param_bytes"]
            met = t1 <= 0.02 * t0 and m1 <= 0.02 * size
            print("| %s | %.0f MiB | %.4f s | %.4f s | %.2f%% | %.1f MiB | %.1f MiB (%.2f%%) | %s |" % (
                name, size / 2 ** 20, t0, t1, 100 * t1 / t0, m0 / 2 ** 20, m1 / 2 ** 20, 100 * m1 / size,
                "yes" if met else "**no**"))


if __name__ == "__main__":
    main()
