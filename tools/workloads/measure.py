"""What the jobs, the benchmarks and the tests observe of a process, written
once: parameter digests, resident memory, and fsdpskip's summary lines."""
import hashlib
import re
import time


def digest(tensor):
    """SHA-1 of a tensor's bytes (a DTensor's whole value, a device tensor's
    copy on the host): equal digests, bitwise equal values."""
    import torch
    tensor = tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor
    data = tensor.detach().contiguous().cpu().view(-1).view(torch.uint8)
    return hashlib.sha1(data.numpy()).hexdigest()  # the array's own buffer: no copy


def rss_kib(field="VmRSS"):
    """A field of /proc/self/status in KiB: VmRSS now, VmHWM the peak."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(field)


def measured(build):
    """build()'s result, its seconds and its peak RSS growth in bytes."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM := VmRSS
    before = rss_kib("VmRSS")
    start = time.perf_counter()
    result = build()
    return result, time.perf_counter() - start, (rss_kib("VmHWM") - before) * 1024


def gathered(value):
    """Every rank's `value`, in rank order (a collective: every rank calls it)."""
    import torch.distributed as dist
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, value)
    return everyone


def summary_lines(text, local_rank=None, prefix=""):
    """fsdpskip's summary lines at exit in `text` (of one local rank when
    given), each line first stripped of `prefix` (torchrun's "[default1]:")."""
    rank = r"\d+" if local_rank is None else str(local_rank)
    summary = re.compile(r"fsdpskip: local rank %s pid \d+: (skipped|audit: would skip) " % rank)
    return [line[len(prefix):] for line in text.splitlines()
            if line.startswith(prefix) and summary.match(line[len(prefix):])]
