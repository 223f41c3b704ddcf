// Making skipped memory read as zeros without committing it.
//
// Every range is cut into pages of `page` bytes: whole pages inside it are
// released, the partial first and last ones written. `page` is the system's
// (4 KiB on most x86-64 kernels, often 64 KiB on Grace's aarch64 kernels)
// unless a caller names another multiple of it: the unit tests run the same
// arithmetic with 4 KiB and 64 KiB pages on whichever kernel they have.
#pragma once

#include <cstddef>

namespace fsdpskip {

// The kernel's page size (sysconf).
size_t system_page_size();

struct Zeroed {
  size_t released = 0;  // whole pages handed back with MADV_DONTNEED
  size_t written = 0;   // partial first and last pages, memset
};

// Makes [data, data + bytes) read as zeros. `private_anonymous` says the
// range is private anonymous memory (the CPU allocator's): only then are its
// whole pages released; otherwise every byte is written.
Zeroed zero_range(void* data, size_t bytes, bool private_anonymous, size_t page = system_page_size());

// True when some whole page inside [data, data + bytes) is in memory
// (mincore), or when that cannot be told.
bool any_page_resident(const void* data, size_t bytes, size_t page = system_page_size());

// The least zero_ done by releasing pages: below it a memset costs less than
// the system calls. 64 KiB, or two pages where pages are larger (with 64 KiB
// pages, a range of 64 KiB rarely holds a whole page; one of 128 KiB always
// holds one).
size_t lazy_zero_threshold(size_t page = system_page_size());

}  // namespace fsdpskip
