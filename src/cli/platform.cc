#include "platform.h"

#include <dlfcn.h>
#include <gnu/libc-version.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <filesystem>

#include "../common/elf_file.h"
#include "elf_facts.h"

namespace fsdpskip::cli {

Platform this_platform() {
  Platform platform;
  platform.architecture = machine_text(kThisMachine);
  struct utsname names;
  if (uname(&names) == 0) platform.kernel_machine = names.machine;
  platform.page_size = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  platform.glibc = gnu_get_libc_version();
  // Debian keeps libraries in /usr/lib/<triplet>/ (multiarch): the running
  // libc's own directory names it, on whichever architecture this is.
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&gnu_get_libc_version), &info) && info.dli_fname != nullptr) {
    std::string directory = std::filesystem::path(info.dli_fname).parent_path().filename().string();
    if (directory.find("-linux-") != std::string::npos) platform.multiarch = directory;
  }
  return platform;
}

std::string platform_text(const Platform& platform) {
  return platform.architecture + " (kernel " + platform.kernel_machine + "), " +
         std::to_string(platform.page_size >> 10) + " KiB pages, glibc " + platform.glibc;
}

}  // namespace fsdpskip::cli
