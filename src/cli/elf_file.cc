#include "elf_file.h"

#include "../common/torch_identity.h"

#include <elf.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <unistd.h>

#include <cstring>
#include <memory>

namespace fsdpskip::cli {
namespace {

// An open ELF file; closes both the descriptor and libelf's handle.
class ElfHandle {
 public:
  ElfHandle(const std::string& path, std::string* error) {
    if (elf_version(EV_CURRENT) == EV_NONE) {
      *error = "libelf is too old";
      return;
    }
    fd_ = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) {
      *error = "cannot open " + path + ": " + strerror(errno);
      return;
    }
    elf_ = elf_begin(fd_, ELF_C_READ_MMAP, nullptr);
    if (elf_ == nullptr || elf_kind(elf_) != ELF_K_ELF) {
      *error = path + " is not an ELF file";
      close_all();
    }
  }
  ~ElfHandle() { close_all(); }
  ElfHandle(const ElfHandle&) = delete;
  ElfHandle& operator=(const ElfHandle&) = delete;

  Elf* get() const { return elf_; }

  // Calls visit(section, header) for every section.
  template <typename Visit>
  void for_each_section(Visit visit) const {
    for (Elf_Scn* section = elf_nextscn(elf_, nullptr); section; section = elf_nextscn(elf_, section)) {
      GElf_Shdr header;
      if (gelf_getshdr(section, &header)) visit(section, header);
    }
  }

 private:
  void close_all() {
    if (elf_) elf_end(elf_);
    if (fd_ >= 0) close(fd_);
    elf_ = nullptr;
    fd_ = -1;
  }
  int fd_ = -1;
  Elf* elf_ = nullptr;
};

std::string hex(const unsigned char* bytes, size_t count) {
  std::string text(2 * count + 1, '\0');
  hex_text(bytes, count, text.data(), text.size());
  text.pop_back();
  return text;
}

std::string build_id_of(Elf_Scn* section) {
  Elf_Data* data = elf_getdata(section, nullptr);
  size_t offset = 0, name_offset, desc_offset;
  GElf_Nhdr note;
  while (data && (offset = gelf_getnote(data, offset, &note, &name_offset, &desc_offset)) > 0) {
    const char* name = static_cast<const char*>(data->d_buf) + name_offset;
    if (note.n_type == NT_GNU_BUILD_ID && note.n_namesz == 4 && memcmp(name, "GNU", 4) == 0)
      return hex(static_cast<const unsigned char*>(data->d_buf) + desc_offset, note.n_descsz);
  }
  return "";
}

// The symbols of the dynamic symbol table `symtab` (its section header).
void read_dynamic_symbols(Elf* elf, Elf_Scn* section, const GElf_Shdr& header, ElfFacts* facts) {
  Elf_Data* data = elf_getdata(section, nullptr);
  size_t count = header.sh_entsize ? header.sh_size / header.sh_entsize : 0;
  for (size_t i = 1; data && i < count; ++i) {
    GElf_Sym symbol;
    if (!gelf_getsym(data, static_cast<int>(i), &symbol) || symbol.st_shndx == SHN_UNDEF) continue;
    int binding = GELF_ST_BIND(symbol.st_info), visibility = GELF_ST_VISIBILITY(symbol.st_other);
    if (binding != STB_GLOBAL && binding != STB_WEAK) continue;
    if (visibility != STV_DEFAULT && visibility != STV_PROTECTED) continue;
    const char* name = elf_strptr(elf, header.sh_link, symbol.st_name);
    if (name == nullptr) continue;
    facts->exported.insert(name);
    if (visibility == STV_PROTECTED) facts->protected_.insert(name);
  }
}

// Names the symbols that the relocations in `section` refer to.
void read_relocations(Elf* elf, Elf_Scn* section, const GElf_Shdr& header, ElfFacts* facts) {
  Elf_Scn* symbols_section = elf_getscn(elf, header.sh_link);
  GElf_Shdr symbols_header;
  if (symbols_section == nullptr || !gelf_getshdr(symbols_section, &symbols_header)) return;
  Elf_Data* symbols = elf_getdata(symbols_section, nullptr);
  Elf_Data* data = elf_getdata(section, nullptr);
  size_t count = header.sh_entsize ? header.sh_size / header.sh_entsize : 0;
  for (size_t i = 0; data && symbols && i < count; ++i) {
    size_t index;
    if (header.sh_type == SHT_RELA) {
      GElf_Rela relocation;
      if (!gelf_getrela(data, static_cast<int>(i), &relocation)) continue;
      index = GELF_R_SYM(relocation.r_info);
    } else {
      GElf_Rel relocation;
      if (!gelf_getrel(data, static_cast<int>(i), &relocation)) continue;
      index = GELF_R_SYM(relocation.r_info);
    }
    GElf_Sym symbol;
    if (index == 0 || !gelf_getsym(symbols, static_cast<int>(index), &symbol)) continue;
    if (const char* name = elf_strptr(elf, symbols_header.sh_link, symbol.st_name)) facts->relocated.insert(name);
  }
}

bool is_symbolic(Elf_Scn* section, const GElf_Shdr& header) {
  Elf_Data* data = elf_getdata(section, nullptr);
  size_t count = header.sh_entsize ? header.sh_size / header.sh_entsize : 0;
  for (size_t i = 0; data && i < count; ++i) {
    GElf_Dyn entry;
    if (!gelf_getdyn(data, static_cast<int>(i), &entry)) continue;
    if (entry.d_tag == DT_SYMBOLIC) return true;
    if (entry.d_tag == DT_FLAGS && (entry.d_un.d_val & DF_SYMBOLIC)) return true;
  }
  return false;
}

}  // namespace

std::optional<ElfFacts> read_elf_facts(const std::string& path, std::string* error) {
  ElfHandle elf(path, error);
  if (elf.get() == nullptr) return std::nullopt;
  ElfFacts facts;
  elf.for_each_section([&](Elf_Scn* section, const GElf_Shdr& header) {
    switch (header.sh_type) {
      case SHT_NOTE:
        if (facts.build_id.empty()) facts.build_id = build_id_of(section);
        break;
      case SHT_DYNSYM:
        read_dynamic_symbols(elf.get(), section, header, &facts);
        break;
      case SHT_RELA:
      case SHT_REL:
        // Only relocations the dynamic linker applies (those against .dynsym).
        if (header.sh_flags & SHF_ALLOC) read_relocations(elf.get(), section, header, &facts);
        break;
      case SHT_DYNAMIC:
        facts.symbolic = is_symbolic(section, header);
        break;
    }
  });
  return facts;
}

std::optional<std::string> read_elf_section(const std::string& path, const std::string& name, std::string* error) {
  ElfHandle elf(path, error);
  if (elf.get() == nullptr) return std::nullopt;
  size_t names_index;
  if (elf_getshdrstrndx(elf.get(), &names_index) != 0) {
    *error = path + " has no section names";
    return std::nullopt;
  }
  std::optional<std::string> contents;
  elf.for_each_section([&](Elf_Scn* section, const GElf_Shdr& header) {
    const char* section_name = elf_strptr(elf.get(), names_index, header.sh_name);
    if (contents || section_name == nullptr || name != section_name) return;
    Elf_Data* data = elf_getdata(section, nullptr);
    contents = data ? std::string(static_cast<const char*>(data->d_buf), data->d_size) : std::string();
    while (!contents->empty() && contents->back() == '\0') contents->pop_back();
  });
  if (!contents) *error = path + " has no " + name + " section";
  return contents;
}

}  // namespace fsdpskip::cli
