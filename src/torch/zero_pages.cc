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
