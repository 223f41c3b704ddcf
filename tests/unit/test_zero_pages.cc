// The page arithmetic of src/torch/zero_pages.cc with 4 KiB pages (x86-64)
// and 64 KiB pages (many Grace kernels), on this kernel's own pages: whole
// pages released, partial first and last pages written, which whole pages
// are in memory, the lazy-zero threshold. What only a 64 KiB-page kernel shows (madvise and
// mincore on its own pages) is not covered here, nor under emulation.
#include "zero_pages.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace fsdpskip {
namespace {

constexpr size_t kLargestPage = size_t{64} << 10;

// Private anonymous memory aligned to the largest page, committed with 0xab.
class Region {
 public:
  explicit Region(size_t bytes) : size_(bytes + 2 * kLargestPage) {
    mapping_ = static_cast<char*>(mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    auto at = reinterpret_cast<uintptr_t>(mapping_);
    base_ = reinterpret_cast<char*>((at + kLargestPage - 1) & ~(uintptr_t{kLargestPage} - 1));
    madvise(mapping_, size_, MADV_NOHUGEPAGE);  // a touched page must not bring in its neighbours
    std::memset(mapping_, 0xab, size_);
  }
  ~Region() { munmap(mapping_, size_); }
  char* base() const { return base_; }
  bool ok() const { return mapping_ != MAP_FAILED; }

 private:
  size_t size_;
  char* mapping_;
  char* base_;
};

// Which of the kernel's pages in [data, data + bytes) are in memory.
std::vector<bool> resident(const char* data, size_t bytes) {
  size_t kernel = system_page_size();
  std::vector<unsigned char> vector(bytes / kernel);
  EXPECT_EQ(mincore(const_cast<char*>(data), bytes, vector.data()), 0);
  std::vector<bool> result;
  for (unsigned char v : vector) result.push_back(v & 1);
  return result;
}

bool all_bytes(const char* data, size_t bytes, unsigned char value) {
  for (size_t i = 0; i < bytes; ++i)
    if (static_cast<unsigned char>(data[i]) != value) return false;
  return true;
}

class ZeroPages : public testing::TestWithParam<size_t> {
 protected:
  void SetUp() override {
    if (page() < system_page_size()) GTEST_SKIP() << "this kernel's pages are larger";
  }
  size_t page() const { return GetParam(); }
};

TEST_P(ZeroPages, WholePagesAreReleasedAndThePartialEdgesWritten) {
  Region region(8 * kLargestPage);
  ASSERT_TRUE(region.ok());
  // From 100 bytes into a page to 300 bytes past the fourth whole page.
  char* data = region.base() + 100;
  size_t bytes = 5 * page() - 100 + 300;
  Zeroed zeroed = zero_range(data, bytes, true, page());
  EXPECT_EQ(zeroed.released, 4 * page());
  EXPECT_EQ(zeroed.written, bytes - 4 * page());
  // The released pages, the whole pages [base + page, base + 5 pages), before
  // anything reads them (a read maps the shared zero page, which counts as in memory).
  for (bool in_memory : resident(region.base() + page(), 4 * page())) EXPECT_FALSE(in_memory);
  EXPECT_TRUE(resident(region.base(), page())[0]) << "the partial first page was written, not released";
  EXPECT_TRUE(all_bytes(data, bytes, 0));
  EXPECT_TRUE(all_bytes(region.base(), 100, 0xab)) << "the byte before the range";
  EXPECT_TRUE(all_bytes(data + bytes, 64, 0xab)) << "the bytes after it";
}

TEST_P(ZeroPages, ARangeWithoutAWholePageIsWritten) {
  Region region(4 * kLargestPage);
  Zeroed zeroed = zero_range(region.base() + 1, page() - 2, true, page());
  EXPECT_EQ(zeroed.released, 0u);
  EXPECT_EQ(zeroed.written, page() - 2);
  EXPECT_TRUE(all_bytes(region.base() + 1, page() - 2, 0));
}

TEST_P(ZeroPages, MemoryOfOtherKindsIsWrittenNeverReleased) {
  Region region(4 * kLargestPage);
  Zeroed zeroed = zero_range(region.base(), 4 * page(), false, page());
  EXPECT_EQ(zeroed.released, 0u);
  EXPECT_EQ(zeroed.written, 4 * page());
  for (bool in_memory : resident(region.base(), 4 * page())) EXPECT_TRUE(in_memory);
}

TEST_P(ZeroPages, AnyPageResidentSeesOneKernelPageInsideTheWholePages) {
  Region region(6 * kLargestPage);
  char* data = region.base() + 100;  // whole pages: [base + page, base + 4 pages)
  size_t bytes = 4 * page();
  EXPECT_TRUE(any_page_resident(data, bytes, page()));
  ASSERT_EQ(madvise(region.base(), 6 * kLargestPage, MADV_DONTNEED), 0);
  EXPECT_FALSE(any_page_resident(data, bytes, page()));
  // The partial edges are not looked at; one kernel page inside a whole page is.
  data[0] = 1;
  data[bytes - 1] = 1;
  EXPECT_FALSE(any_page_resident(data, bytes, page()));
  region.base()[2 * page() + page() - system_page_size()] = 1;  // the last kernel page of the third page
  EXPECT_TRUE(any_page_resident(data, bytes, page()));
}

TEST_P(ZeroPages, ARangeAsLargeAsTheThresholdAlwaysReleasesAPage) {
  size_t threshold = lazy_zero_threshold(page());
  EXPECT_EQ(threshold, page() == kLargestPage ? 2 * kLargestPage : size_t{64} << 10);
  Region region(4 * kLargestPage);
  for (size_t offset : {size_t{0}, size_t{64}, page() / 2, page() - 8}) {
    Zeroed zeroed = zero_range(region.base() + offset, threshold, true, page());
    EXPECT_GE(zeroed.released, page()) << "offset " << offset;
  }
}

INSTANTIATE_TEST_SUITE_P(PageSizes, ZeroPages, testing::Values(size_t{4} << 10, kLargestPage),
                         [](const testing::TestParamInfo<size_t>& info) {
                           return std::to_string(info.param >> 10) + "KiB";
                         });

}  // namespace
}  // namespace fsdpskip
