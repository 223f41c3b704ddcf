#include "zero_pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

namespace fsdpskip {

Zeroed zero_range(void* data, size_t bytes, bool private_anonymous) {
  Zeroed zeroed;
  auto begin = reinterpret_cast<uintptr_t>(data);
  uintptr_t end = begin + bytes;
  if (private_anonymous) {
    const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    uintptr_t first = (begin + page - 1) & ~(page - 1);
    uintptr_t last = end & ~(page - 1);
    // The next read of a released private anonymous page maps the shared
    // zero page; it is committed again only when written.
    if (first < last && madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED) == 0) {
      std::memset(data, 0, first - begin);
      std::memset(reinterpret_cast<void*>(last), 0, end - last);
      zeroed.released = last - first;
      zeroed.written = bytes - zeroed.released;
      return zeroed;
    }
  }
  std::memset(data, 0, bytes);
  zeroed.written = bytes;
  return zeroed;
}

}  // namespace fsdpskip
