// The preload's ELF reader (src/preload/elf_identity.cc), which reads a
// plugin file before dlopen: any bytes, as a file, must never crash it.
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "elf_identity.h"
#include "fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fsdpskip::fuzz::File file(data, size);
  char out[1024];
  fsdpskip::read_fd_section(file.fd(), ".fsdpskip_torch_id", out, sizeof out);
  fsdpskip::read_fd_section(file.fd(), ".dynsym", out, 2);
  return 0;
}
