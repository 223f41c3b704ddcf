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


def reset_peak_rss():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM := VmRSS


class PeakGrowth:
    """How much the peak RSS grew from now on, less the file-backed pages
    mapped meanwhile: libraries' code and unwind tables met for the first
    time (a native stack's first unwind through libtorch maps megabytes of
    its .eh_frame). Those are the page cache's, shared with every process,
    and their number depends on how much of the file the cache holds (the
    kernel maps cached pages around each fault: 6.7 MB on a cold cache and
    10.2 MB on a warm one for the same 0.1B build, 2026-12-06). What is left
    is the anonymous peak's growth, less at most the file pages mapped after
    that peak. A span that ends with fewer file pages mapped than it began
    with (a checkpoint read through mmap and closed) subtracts nothing."""

    def __init__(self):
        reset_peak_rss()
        self.rss, self.file = rss_kib("VmRSS"), rss_kib("RssFile")

    def bytes(self):
        return (rss_kib("VmHWM") - self.rss - max(0, rss_kib("RssFile") - self.file)) * 1024


def resident_fraction(tensors):
    """The fraction of the tensors' storages (each counted once) whose whole
    pages are in memory (mincore): what a model's parameters hold of this
    process's RAM right now, whatever memory they landed on."""
    import ctypes
    import mmap
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p)
    page = mmap.PAGESIZE
    storages = {}
    for tensor in tensors:
        storage = tensor.untyped_storage() if hasattr(tensor, "untyped_storage") else tensor.storage()
        storages[storage.data_ptr()] = storage.nbytes()
    total = resident = 0
    for start, size in storages.items():
        first, end = -(-start // page) * page, (start + size) // page * page
        total += size
        if end <= first:
            continue
        pages = (end - first) // page
        vector = ctypes.create_string_buffer(pages)
        if libc.mincore(ctypes.c_void_p(first), ctypes.c_size_t(end - first), vector) != 0:
            raise OSError(ctypes.get_errno(), "mincore")
        resident += sum(byte & 1 for byte in vector.raw) * page
    return resident / total if total else 0.0


def measured(build):
    """build()'s result, its seconds and its peak RSS growth in bytes, every
    page counted: the framework flows compare one rank with another or with
    a run without fsdpskip, each measured alike. Counting anonymous pages
    alone would compare the ranks' own paths through a framework rather than
    their parameters: building test_frameworks' 49.7 MB Mistral model in the
    sid root (transformers 5.12.1, 2026-12-06), rank 1's anonymous peak grew
    4.2 MB and rank 0's 0.4 MB, the same with FSDPSKIP_STACKS=off. Rank 1's
    was a transient peak (its RSS grew 0.4 MB in all) of ten steps of
    0.25-0.72 MB, nine of them while transformers' loader ran its
    materializing threads (spawn_materialize, a thread pool: stacks and
    malloc arenas), none a placeholder's size; rank 0's parameters are views
    of the checkpoint's mmap."""
    reset_peak_rss()
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
