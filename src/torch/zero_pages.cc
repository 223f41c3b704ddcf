#include "zero_pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

namespace fsdpskip {
namespace {

// The whole pages of `page` bytes inside [data, data + bytes): [first, last).
struct WholePages {
  uintptr_t begin, end, first, last;
  WholePages(const void* data, size_t bytes, size_t page)
      : begin(reinterpret_cast<uintptr_t>(data)),
        end(begin + bytes),
        first((begin + page - 1) & ~(uintptr_t{page} - 1)),
        last(end & ~(uintptr_t{page} - 1)) {}
  bool any() const { return first < last; }
};

// A page size the arithmetic can use: a power of two, a multiple of the kernel's.
size_t usable(size_t page) {
  size_t kernel_page = system_page_size();
  return page >= kernel_page && (page & (page - 1)) == 0 ? page : kernel_page;
}

}  // namespace

size_t system_page_size() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

size_t lazy_zero_threshold(size_t page) {
  constexpr size_t kMemsetBelow = size_t{64} << 10;
  return 2 * page > kMemsetBelow ? 2 * page : kMemsetBelow;
}

bool any_page_resident(const void* data, size_t bytes, size_t page) {
  WholePages pages(data, bytes, usable(page));
  constexpr size_t kPagesPerCall = 4096;
  unsigned char resident[kPagesPerCall];
  const size_t kernel_page = system_page_size();
  for (uintptr_t at = pages.first; at < pages.last;) {
    size_t count = (pages.last - at) / kernel_page < kPagesPerCall ? (pages.last - at) / kernel_page : kPagesPerCall;
    if (mincore(reinterpret_cast<void*>(at), count * kernel_page, resident) != 0) return true;
    for (size_t i = 0; i < count; ++i)
      if (resident[i] & 1) return true;
    at += count * kernel_page;
  }
  return false;
}

Zeroed zero_range(void* data, size_t bytes, bool private_anonymous, size_t page) {
  Zeroed zeroed;
  WholePages pages(data, bytes, usable(page));
  // The next read of a released private anonymous page maps the shared zero
  // page; it is committed again only when written.
  if (private_anonymous && pages.any() &&
      madvise(reinterpret_cast<void*>(pages.first), pages.last - pages.first, MADV_DONTNEED) == 0) {
    std::memset(data, 0, pages.first - pages.begin);
    std::memset(reinterpret_cast<void*>(pages.last), 0, pages.end - pages.last);
    zeroed.released = pages.last - pages.first;
    zeroed.written = bytes - zeroed.released;
    return zeroed;
  }
  std::memset(data, 0, bytes);
  zeroed.written = bytes;
  return zeroed;
}

}  // namespace fsdpskip
