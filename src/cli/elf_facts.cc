#include "elf_facts.h"

#include "../common/elf_file.h"

namespace fsdpskip::cli {
namespace {

void read_dynamic_symbols(const ElfFile& elf, const Elf64_Shdr& table, ElfFacts* facts) {
  for (size_t i = 1; i < elf.entries<Elf64_Sym>(table); ++i) {
    Elf64_Sym symbol;
    if (!elf.entry(table, i, &symbol) || symbol.st_shndx == SHN_UNDEF) continue;
    int binding = ELF64_ST_BIND(symbol.st_info), visibility = ELF64_ST_VISIBILITY(symbol.st_other);
    if (binding != STB_GLOBAL && binding != STB_WEAK) continue;
    if (visibility != STV_DEFAULT && visibility != STV_PROTECTED) continue;
    const char* name = elf.string(table.sh_link, symbol.st_name);
    if (name == nullptr) continue;
    facts->exported.insert(name);
    if (visibility == STV_PROTECTED) facts->protected_.insert(name);
  }
}

// Names the symbols that the relocations in `table` refer to, whatever
// their type (the architecture's PLT, GOT and data relocations alike).
void read_relocations(const ElfFile& elf, const Elf64_Shdr& table, ElfFacts* facts) {
  Elf64_Shdr symbols;
  if (!elf.section(table.sh_link, &symbols)) return;
  bool rela = table.sh_type == SHT_RELA;
  size_t count = rela ? elf.entries<Elf64_Rela>(table) : elf.entries<Elf64_Rel>(table);
  for (size_t i = 0; i < count; ++i) {
    Elf64_Rela with_addend;
    Elf64_Rel without_addend;
    bool read = rela ? elf.entry(table, i, &with_addend) : elf.entry(table, i, &without_addend);
    Elf64_Sym symbol;
    size_t index = read ? ELF64_R_SYM(rela ? with_addend.r_info : without_addend.r_info) : 0;
    if (!read || index == 0 || !elf.entry(symbols, index, &symbol)) continue;
    if (const char* name = elf.string(symbols.sh_link, symbol.st_name)) facts->relocated.insert(name);
  }
}

bool is_symbolic(const ElfFile& elf, const Elf64_Shdr& table) {
  for (size_t i = 0; i < elf.entries<Elf64_Dyn>(table); ++i) {
    Elf64_Dyn entry;
    if (!elf.entry(table, i, &entry)) break;
    if (entry.d_tag == DT_SYMBOLIC) return true;
    if (entry.d_tag == DT_FLAGS && (entry.d_un.d_val & DF_SYMBOLIC)) return true;
  }
  return false;
}

}  // namespace

std::string machine_text(uint16_t machine) {
  char text[32];
  return machine_name(machine, text, sizeof text);
}

std::optional<ElfFacts> read_elf_facts(const std::string& path, std::string* error) {
  ElfFile elf(path.c_str());
  if (const char* problem = elf.problem_here()) {
    *error = path + " " + problem;
    return std::nullopt;
  }
  ElfFacts facts;
  facts.machine = elf.machine();
  for (size_t i = 0; i < elf.section_count(); ++i) {
    Elf64_Shdr section;
    if (!elf.section(i, &section)) break;
    const char* bytes;
    size_t size;
    switch (section.sh_type) {
      case SHT_NOTE:
        if (facts.build_id.empty() && elf.contents(section, &bytes, &size)) {
          char id[129];
          build_id_of_notes(bytes, size, id, sizeof id, section.sh_addralign);
          facts.build_id = id;
        }
        break;
      case SHT_DYNSYM:
        read_dynamic_symbols(elf, section, &facts);
        break;
      case SHT_RELA:
      case SHT_REL:
        // Only relocations the dynamic linker applies (those against .dynsym).
        if (section.sh_flags & SHF_ALLOC) read_relocations(elf, section, &facts);
        break;
      case SHT_DYNAMIC:
        facts.symbolic = is_symbolic(elf, section);
        break;
    }
  }
  return facts;
}

std::optional<std::string> read_elf_section(const std::string& path, const std::string& name, std::string* error,
                                            uint16_t* machine) {
  ElfFile elf(path.c_str());
  if (const char* problem = elf.problem()) {
    *error = path + " " + problem;
    return std::nullopt;
  }
  if (machine != nullptr) *machine = elf.machine();
  Elf64_Shdr section;
  const char* bytes;
  size_t size;
  if (!elf.find_section(name.c_str(), &section) || !elf.contents(section, &bytes, &size)) {
    *error = path + " has no " + name + " section";
    return std::nullopt;
  }
  std::string contents(bytes, size);
  while (!contents.empty() && contents.back() == '\0') contents.pop_back();
  return contents;
}

}  // namespace fsdpskip::cli
