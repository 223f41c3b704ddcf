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

}  // namespace fsdpskip
