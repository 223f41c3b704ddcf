// The command's ELF reader (src/cli/elf_file.cc), which the doctor and
// `plugin list` run on libraries and plugins found on the machine.
#include <stddef.h>
#include <stdint.h>

#include "elf_file.h"
#include "fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fsdpskip::fuzz::File file(data, size);
  std::string error;
  fsdpskip::cli::read_elf_facts(file.path(), &error);
  fsdpskip::cli::read_elf_section(file.path(), ".fsdpskip_torch_id", &error);
  return 0;
}
