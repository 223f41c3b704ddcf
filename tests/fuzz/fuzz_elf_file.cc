// The one ELF reader (src/common/elf_file.cc), which the preload runs on a
// plugin file before dlopen and the command on libraries and plugins found
// on the machine, with the command's facts on top of it: any bytes, as a
// file, must never crash them.
#include <stddef.h>
#include <stdint.h>

#include "../../src/common/elf_file.h"
#include "elf_facts.h"
#include "fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fsdpskip::fuzz::File file(data, size);
  {
    fsdpskip::ElfFile elf(file.fd());
    char out[1024];
    elf.section_text(".fsdpskip_torch_id", out, sizeof out);
    elf.section_text(".dynsym", out, 2);
    elf.problem_here();
    for (size_t i = 0; i < elf.section_count(); ++i) {
      Elf64_Shdr section;
      const char* bytes;
      size_t bytes_size;
      if (elf.section(i, &section) && section.sh_type == SHT_NOTE && elf.contents(section, &bytes, &bytes_size))
        fsdpskip::build_id_of_notes(bytes, bytes_size, out, sizeof out);
    }
  }
  std::string error;
  fsdpskip::cli::read_elf_facts(file.path(), &error);
  fsdpskip::cli::read_elf_section(file.path(), ".fsdpskip_torch_id", &error);
  return 0;
}
