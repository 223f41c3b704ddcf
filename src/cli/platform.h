// The machine the command runs on, as `fsdpskip doctor` reports it: the
// architecture fsdpskip was built for (and the kernel's, which must agree),
// the kernel's page size, glibc, and where this system keeps its libraries.
#pragma once

#include <cstddef>
#include <string>

namespace fsdpskip::cli {

struct Platform {
  std::string architecture;    // this build's: "x86-64", "AArch64"
  std::string kernel_machine;  // uname's: "x86_64", "aarch64"
  size_t page_size = 0;        // bytes
  std::string glibc;           // "2.36"
  std::string multiarch;       // "aarch64-linux-gnu": the directory the running libc lives in; "" where none
};

Platform this_platform();

// One line: "AArch64 (kernel aarch64), 64 KiB pages, glibc 2.36".
std::string platform_text(const Platform& platform);

}  // namespace fsdpskip::cli
