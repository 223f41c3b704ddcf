// What `fsdpskip doctor` and `fsdpskip plugin` need to know about a shared
// library, read from the file itself by the common reader
// (src/common/elf_file.h): its architecture, its build-id, a named section,
// the dynamic symbols it defines and exports, the symbols its dynamic
// relocations reach, and whether it binds its own calls (DF_SYMBOLIC).
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>

namespace fsdpskip::cli {

struct ElfFacts {
  uint16_t machine = 0;                 // e_machine
  std::string build_id;                 // hex; "" when the file has none
  std::set<std::string> exported;       // defined, global or weak, default or protected visibility
  std::set<std::string> protected_;     // of those, STV_PROTECTED: bound inside, never interposed
  std::set<std::string> relocated;      // named by a dynamic relocation (PLT, GOT or data)
  bool symbolic = false;                // DT_SYMBOLIC or DF_SYMBOLIC: -Bsymbolic
};

// Reads `path`, of this build's architecture; on failure returns nullopt
// and says why in `error` ("<path> is built for AArch64; this fsdpskip runs
// on x86-64").
std::optional<ElfFacts> read_elf_facts(const std::string& path, std::string* error);

// The contents of section `name` (without trailing NULs), or nullopt with
// the reason in `error`. Any architecture: `machine`, when given, receives
// the file's.
std::optional<std::string> read_elf_section(const std::string& path, const std::string& name, std::string* error,
                                            uint16_t* machine = nullptr);

// "x86-64", "AArch64", ...
std::string machine_text(uint16_t machine);

}  // namespace fsdpskip::cli
