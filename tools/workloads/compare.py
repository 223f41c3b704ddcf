"""Runs load_model.py as 2-rank torchrun jobs, per size, init style and
variant, and prints rank 1's (and rank 0's) construction time and peak RSS
growth side by side. Variants: none (no preload), on (preload, FSDPSKIP=on),
meta (no preload, the model built on meta and materialised: no init at all).
"""
import argparse
import json
import os
import statistics
import sys
import tempfile

import launch
import measure
import policy_variables

HERE = os.path.dirname(os.path.abspath(__file__))


def run_job(build, size, style, variant, sync):
    with tempfile.TemporaryDirectory() as out:
        env = policy_variables.without_policy(os.environ)
        if variant in ("on", "off"):  # off: preloaded and inert on every rank
            env.update(LD_PRELOAD=os.path.join(build, "lib", "libfsdpskip.so"), FSDPSKIP=variant)
        done = launch.run([os.path.join(HERE, "load_model.py"), "--size", size, "--out", out, "--sync", sync,
                           "--style", "meta" if variant == "meta" else style] +
                          (["--verify"] if sync != "none" else []), env)
        if done.returncode != 0:
            sys.exit("job failed (%s %s %s):\n%s" % (size, style, variant, done.stderr[-3000:]))
        ranks = [json.load(open(os.path.join(out, "rank%d.json" % r))) for r in (0, 1)]
        summary = measure.summary_lines(done.stdout + done.stderr, 1, prefix="[default1]:")
        for result in ranks:
            if sync != "none" and not (result["equal_to_rank0"] and result["all_finite"]):
                sys.exit("rank %d does not hold rank 0's values after the sync" % result["rank"])
        return ranks, summary


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--build", required=True)
    parser.add_argument("--sizes", default="0.5b")
    parser.add_argument("--styles", default="hf4")
    parser.add_argument("--variants", default="none,on")
    parser.add_argument("--sync", default="ddp")
    parser.add_argument("--repetitions", type=int, default=1)
    args = parser.parse_args()
    variants = args.variants.split(",")
    rows = []
    for size in args.sizes.split(","):
        for style in args.styles.split(","):
            samples = {v: [] for v in variants}
            summaries = []
            for _ in range(args.repetitions):
                for variant in variants:  # interleaved, so drift hits every variant alike
                    ranks, summary = run_job(args.build, size, style, variant, args.sync)
                    samples[variant].append(ranks)
                    summaries += summary
            for variant in variants:
                for rank in (1, 0):
                    seconds = [r[rank]["build_seconds"] for r in samples[variant]]
                    rss = [r[rank]["rss_growth_bytes"] for r in samples[variant]]
                    rows.append((size, style, variant, rank, statistics.median(seconds), min(seconds), max(seconds),
                                 statistics.median(rss), samples[variant][0][rank]["model_bytes"]))
            for line in summaries[-1:]:
                print(line)
    print()
    print("| size | init | variant | rank | build time (median, min-max) | peak RSS growth | of model bytes |")
    print("|---|---|---|---|---|---|---|")
    for size, style, variant, rank, median, low, high, rss, model in rows:
        print("| %s | %s | %s | %d | %.3f s (%.3f-%.3f) | %.1f MiB | %.1f%% |" % (
            size, style, variant, rank, median, low, high, rss / 2 ** 20, 100.0 * rss / model))
    for size in args.sizes.split(","):
        for style in args.styles.split(","):
            by = {(r[2], r[3]): r for r in rows if r[0] == size and r[1] == style}
            if ("none", 1) in by and ("on", 1) in by:
                print("\nrank 1, %s %s: build time %.3f s -> %.3f s (%.1f%%), peak RSS growth %.1f MiB -> %.1f MiB "
                      "(%.1f%%)" % (size, style, by["none", 1][4], by["on", 1][4],
                                    100 * by["on", 1][4] / by["none", 1][4], by["none", 1][7] / 2 ** 20,
                                    by["on", 1][7] / 2 ** 20, 100 * by["on", 1][7] / max(by["none", 1][7], 1)))


if __name__ == "__main__":
    main()
