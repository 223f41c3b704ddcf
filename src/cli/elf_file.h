// What `fsdpskip doctor` needs to know about a shared library, read from the
// file itself (64-bit little-endian ELF, every access bounds-checked): its build-id, a named section, the dynamic symbols it
// defines and exports, the symbols its dynamic relocations reach, and whether
// it binds its own calls (DF_SYMBOLIC).
#pragma once

#include <optional>
#include <set>
#include <string>

namespace fsdpskip::cli {

struct ElfFacts {
  std::string build_id;                 // hex; "" when the file has none
  std::set<std::string> exported;       // defined, global or weak, default or protected visibility
  std::set<std::string> protected_;     // of those, STV_PROTECTED: bound inside, never interposed
  std::set<std::string> relocated;      // named by a dynamic relocation (PLT, GOT or data)
  bool symbolic = false;                // DT_SYMBOLIC or DF_SYMBOLIC: -Bsymbolic
};

// Reads `path`; on failure returns nullopt and says why in `error`.
std::optional<ElfFacts> read_elf_facts(const std::string& path, std::string* error);

// The contents of section `name` (without trailing NULs), or nullopt.
std::optional<std::string> read_elf_section(const std::string& path, const std::string& name, std::string* error);

}  // namespace fsdpskip::cli
