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

// Calls visit(page_begin, pages, resident) for each run of whole pages inside
// [data, data + bytes) that are all in memory or all not; a page larger than
// the kernel's is in memory when all of its kernel pages are. Returns false
// when mincore fails (the caller then treats the range as in use).
template <typename Visit>
bool for_each_residency_run(const void* data, size_t bytes, size_t page, Visit visit) {
  const size_t kernel_page = system_page_size();
  const size_t per_page = page / kernel_page;  // kernel pages per page
  WholePages pages(data, bytes, page);
  constexpr size_t kKernelPagesPerCall = 4096;
  const size_t pages_per_call = kKernelPagesPerCall / per_page;
  unsigned char resident[kKernelPagesPerCall];
  for (uintptr_t at = pages.first; at < pages.last;) {
    size_t count = (pages.last - at) / page < pages_per_call ? (pages.last - at) / page : pages_per_call;
    if (mincore(reinterpret_cast<void*>(at), count * page, resident) != 0) return false;
    auto in_memory = [&](size_t index) {
      for (size_t k = 0; k < per_page; ++k)
        if (!(resident[index * per_page + k] & 1)) return false;
      return true;
    };
    for (size_t run = 0; run < count;) {
      bool state = in_memory(run);
      size_t end = run + 1;
      while (end < count && in_memory(end) == state) ++end;
      if (!visit(at + run * page, end - run, state)) return true;
      run = end;
    }
    at += count * page;
  }
  return true;
}

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

bool all_pages_resident(const void* data, size_t bytes, size_t page) {
  bool all = true;
  bool known = for_each_residency_run(data, bytes, usable(page),
                                      [&](uintptr_t, size_t, bool resident) { return all = resident; });
  return all || !known;
}

Zeroed zero_unresident(void* data, size_t bytes, size_t page) {
  page = usable(page);
  WholePages pages(data, bytes, page);
  if (!pages.any()) return zero_range(data, bytes, false, page);
  Zeroed zeroed;
  bool known = for_each_residency_run(data, bytes, page, [&](uintptr_t at, size_t count, bool resident) {
    if (resident || madvise(reinterpret_cast<void*>(at), count * page, MADV_DONTNEED) != 0) {
      std::memset(reinterpret_cast<void*>(at), 0, count * page);
    } else {
      zeroed.released += count * page;
    }
    return true;
  });
  if (!known) return zero_range(data, bytes, false, page);
  std::memset(data, 0, pages.first - pages.begin);
  std::memset(reinterpret_cast<void*>(pages.last), 0, pages.end - pages.last);
  zeroed.written = bytes - zeroed.released;
  return zeroed;
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
