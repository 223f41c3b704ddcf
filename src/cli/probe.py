"""The live probe of `fsdpskip doctor --python`: run by that Python under
libfsdpskip.so with FSDPSKIP=on, FSDPSKIP_LOCAL_RANK=1 and FSDPSKIP_LOG=trace.
Each step exercises one interposed symbol on a fresh parameter and reads the
plugin's trace lines (fd 2) to see that the hook fired and skipped; then it
reads the parameter, which materializes it, and checks that it holds what the
same call gives a plain tensor from the same generator state. Prints one JSON object per step on stdout; the doctor reads them,
and the process's report (FSDPSKIP_REPORT) for what only exit can tell.

usage: python probe.py STORE_FILE
"""
import datetime
import inspect
import json
import os
import sys
import tempfile

import torch
import torch.distributed as dist

N = 1 << 12  # small: the probe must be quick on any machine


def captured(step):
    """Runs step() with fd 2 going to a file; returns (result, error, lines)."""
    with tempfile.TemporaryFile(mode="w+b") as sink:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(sink.fileno(), 2)
        result, error = None, None
        try:
            result = step()
        except Exception as caught:  # reported, never raised: the probe goes on
            error = caught
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        sink.seek(0)
        return result, error, sink.read().decode(errors="replace").splitlines()


def placeholder():
    """A parameter over memory holding 7.0, as a loader's placeholder would."""
    return torch.nn.Parameter(torch.full((N,), 7.0))


def report(check, ok, detail):
    print(json.dumps({"check": check, "ok": bool(ok), "detail": detail}), flush=True)


def report_not_applicable(check, detail):
    print(json.dumps({"check": check, "ok": None, "detail": detail}), flush=True)


def without_fsdpskip(run, state):
    """What run() gives a plain tensor (not a parameter: never skipped) from
    generator state `state`; the generator is left where it was."""
    after = torch.get_rng_state()
    torch.set_rng_state(state)
    reference = run(torch.full((N,), 7.0))
    torch.set_rng_state(after)
    return reference


def skipped_as(check, kernel, make, run, expected=None):
    """make() builds the tensor; run(t) inits it. Skipped: a '<kernel> -> skip'
    trace line; read afterwards, it holds what the call gives without
    fsdpskip (expected(), or run() on a plain tensor from the same state)."""
    tensor = make()
    state = torch.get_rng_state()
    result, error, lines = captured(lambda: run(tensor))
    if error is not None:
        return report(check, False, "raised %s: %s" % (type(error).__name__, error))
    target = result if isinstance(result, torch.Tensor) else tensor
    fired = any(("%s -> skip" % kernel) in line for line in lines)
    reference = expected() if expected else without_fsdpskip(run, state)
    same = torch.equal(target.detach(), reference.detach())
    report(check, fired and same, "skipped; read, it holds the values without fsdpskip" if fired and same else
           "hook %s, values %s" % ("fired" if fired else "never fired", "as without fsdpskip" if same else "differ"))


def main():
    store = sys.argv[1]
    kept = []  # every probed parameter: broadcast at the end, so none stays pending
    torch.manual_seed(0)  # the plugin loads here, before the first parameter's storage is made

    # c10::TensorImpl::set_requires_grad: nn.Parameter tags its storage.
    p = placeholder()
    skipped_as("set_requires_grad", "normal_", lambda: p, lambda t: t.data.normal_())
    kept.append(p)
    for check, kernel, run in [
        ("normal_", "normal_", lambda t: t.data.normal_(0.0, 0.02)),
        ("uniform_", "uniform_", lambda t: t.data.uniform_(-1.0, 1.0)),
        ("zero_", "zero_", lambda t: t.data.zero_()),
        ("fill_ (Scalar)", "fill_", lambda t: t.data.fill_(3.0)),
        ("fill_ (Tensor)", "fill_", lambda t: t.data.fill_(torch.tensor(3.0))),
    ]:
        kept.append(placeholder())
        skipped_as(check, kernel, lambda: kept[-1], run)

    # at::native::set_data: `param.data = t` moves the tag to the new storage.
    def replaced():
        q = torch.nn.Parameter(torch.empty(0))
        q.data = torch.full((N,), 7.0)
        kept.append(q)
        return q
    skipped_as("set_data", "normal_", replaced, lambda t: t.data.normal_())

    # at::native::copy_: converting a skipped placeholder stays skipped.
    source = placeholder()
    source.data.normal_()
    kept.append(source)
    skipped_as("copy_ (conversion)", "copy_", lambda: source, lambda t: t.data.double(),
               expected=lambda: source.detach().double())

    # trunc_normal_: up to torch 2.11 uniform_ then erfinv_, mul_, add_, clamp_
    # in place (the chain), each skipped and joined to the recipe; from 2.12
    # normal_ then rejection sampling, whose test reads what it drew: the
    # storage is materialized there and the test runs. Either way, read, it
    # holds exactly the values without fsdpskip.
    is_chain = "erfinv" in inspect.getsource(torch.nn.init._no_grad_trunc_normal_)
    kept.append(placeholder())
    state = torch.get_rng_state()
    truncate = lambda t: torch.nn.init.trunc_normal_(t, std=0.02)  # noqa: E731
    _, error, lines = captured(lambda: truncate(kept[-1]))
    same = error is None and torch.equal(kept[-1].detach(), without_fsdpskip(truncate, state))
    report("trunc_normal_", same, "raised %s" % error if error else "as without fsdpskip" if same else "values differ")
    if is_chain:
        steps = ("erfinv_", "mul_", "add_", "clamp_")
        unfired = [step for step in steps if not any(("%s -> skip" % step) in line for line in lines)]
        report("chain (erfinv_, mul_, add_, clamp_)", same and not unfired,
               "skipped, joined to uniform_'s recipe" if not unfired else "not skipped: " + ", ".join(unfired))
        report_not_applicable("comparisons (lt, gt, bitwise_or, any)", "this torch's trunc_normal_ is the chain")
    else:
        report_not_applicable("chain (erfinv_, mul_, add_, clamp_)", "not used by this torch's trunc_normal_")
        report_not_applicable("comparisons (lt, gt, bitwise_or, any)",
                              "its rejection test reads what it drew at once: its draws run (nothing saved)")

    # torch's own argument checks still raise on a skipped call.
    kept.append(placeholder())
    _, error, _ = captured(lambda: kept[-1].data.normal_(0.0, -1.0))
    report("errors pass through", isinstance(error, RuntimeError),
           "normal_ with std < 0 raised RuntimeError" if isinstance(error, RuntimeError)
           else "normal_ with std < 0 raised %r" % error)

    # c10d::ProcessGroupGloo::broadcast: rank 0's data arrives, nothing stays pending.
    # A group of its own, dropped while Python is alive: the default group,
    # left to interpreter finalization, can abort in gloo's threads (torch
    # 2.15, pytorch #190489), and destroy_process_group() can hang (torch 2.6).
    def broadcast():
        group = dist.ProcessGroupGloo(dist.FileStore(store, 1), 0, 1, datetime.timedelta(seconds=60))
        for tensor in kept:
            group.broadcast(tensor.data, 0).wait()
        del group
    _, error, _ = captured(broadcast)
    report("gloo broadcast", error is None, "raised %s" % error if error else "ran (the report confirms)")


if __name__ == "__main__":
    main()
