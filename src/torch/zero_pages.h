// Making skipped memory read as zeros without committing it.
#pragma once

#include <cstddef>

namespace fsdpskip {

struct Zeroed {
  size_t released = 0;  // whole pages handed back with MADV_DONTNEED
  size_t written = 0;   // partial first and last pages, memset
};

// Makes [data, data + bytes) read as zeros. `private_anonymous` says the
// range is private anonymous memory (the CPU allocator's): only then are its
// whole pages released; otherwise every byte is written.
Zeroed zero_range(void* data, size_t bytes, bool private_anonymous);

// True when every whole page inside [data, data + bytes) is in memory
// (mincore): a range in use, such as a gradient zeroed every step.
bool all_pages_resident(const void* data, size_t bytes);

// zero_range for the CPU allocator's memory outside a loading phase: pages in
// memory are written (they are in use: releasing them would only make the
// next write fault them in again), the others released. Commits nothing.
Zeroed zero_unresident(void* data, size_t bytes);

}  // namespace fsdpskip
