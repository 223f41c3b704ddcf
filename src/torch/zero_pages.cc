#include "zero_pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

namespace fsdpskip {
namespace {

uintptr_t page_size() { return static_cast<uintptr_t>(sysconf(_SC_PAGESIZE)); }

// Calls visit(page_begin, pages, resident) for each run of whole pages inside
// [data, data + bytes) that are all in memory or all not; returns false when
// mincore fails (the caller then treats the range as in use).
template <typename Visit>
bool for_each_residency_run(const void* data, size_t bytes, Visit visit) {
  const uintptr_t page = page_size();
  auto begin = reinterpret_cast<uintptr_t>(data);
  uintptr_t first = (begin + page - 1) & ~(page - 1);
  uintptr_t last = (begin + bytes) & ~(page - 1);
  constexpr size_t kPagesPerCall = 4096;
  unsigned char resident[kPagesPerCall];
  for (uintptr_t at = first; at < last;) {
    size_t pages = (last - at) / page < kPagesPerCall ? (last - at) / page : kPagesPerCall;
    if (mincore(reinterpret_cast<void*>(at), pages * page, resident) != 0) return false;
    for (size_t run = 0; run < pages;) {
      size_t end = run + 1;
      while (end < pages && (resident[end] & 1) == (resident[run] & 1)) ++end;
      if (!visit(at + run * page, end - run, (resident[run] & 1) != 0)) return true;
      run = end;
    }
    at += pages * page;
  }
  return true;
}

}  // namespace

bool all_pages_resident(const void* data, size_t bytes) {
  bool all = true;
  bool known = for_each_residency_run(data, bytes, [&](uintptr_t, size_t, bool resident) { return all = resident; });
  return all || !known;
}

Zeroed zero_unresident(void* data, size_t bytes) {
  Zeroed zeroed;
  const uintptr_t page = page_size();
  auto begin = reinterpret_cast<uintptr_t>(data);
  uintptr_t first = (begin + page - 1) & ~(page - 1);
  uintptr_t last = (begin + bytes) & ~(page - 1);
  if (first >= last) return zero_range(data, bytes, false);
  bool known = for_each_residency_run(data, bytes, [&](uintptr_t at, size_t pages, bool resident) {
    if (resident || madvise(reinterpret_cast<void*>(at), pages * page, MADV_DONTNEED) != 0) {
      std::memset(reinterpret_cast<void*>(at), 0, pages * page);
    } else {
      zeroed.released += pages * page;
    }
    return true;
  });
  if (!known) return zero_range(data, bytes, false);
  std::memset(data, 0, first - begin);
  std::memset(reinterpret_cast<void*>(last), 0, begin + bytes - last);
  zeroed.written = bytes - zeroed.released;
  return zeroed;
}

Zeroed zero_range(void* data, size_t bytes, bool private_anonymous) {
  Zeroed zeroed;
  auto begin = reinterpret_cast<uintptr_t>(data);
  uintptr_t end = begin + bytes;
  if (private_anonymous) {
    const uintptr_t page = page_size();
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
