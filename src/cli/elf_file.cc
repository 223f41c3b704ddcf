#include "elf_file.h"

#include "../common/torch_identity.h"

#include <elf.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <string_view>

namespace fsdpskip::cli {
namespace {

// A 64-bit little-endian ELF file mapped read-only; every access is checked
// against the file's size, so a truncated or corrupt file is an error, never
// a crash.
class MappedElf {
 public:
  MappedElf(const std::string& path, std::string* error) {
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
      *error = "cannot open " + path + ": " + strerror(errno);
      return;
    }
    struct stat status;
    if (fstat(fd, &status) != 0 || !S_ISREG(status.st_mode)) {
      *error = path + " is not a regular file";
    } else if (static_cast<size_t>(status.st_size) < sizeof(Elf64_Ehdr)) {
      *error = path + " is not an ELF file";
    } else {
      size_ = status.st_size;
      void* mapped = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (mapped == MAP_FAILED) *error = "cannot map " + path + ": " + strerror(errno);
      else file_ = static_cast<const char*>(mapped);
    }
    close(fd);
    if (file_ == nullptr) return;
    const auto* header = reinterpret_cast<const Elf64_Ehdr*>(file_);
    if (memcmp(header->e_ident, ELFMAG, SELFMAG) != 0) {
      *error = path + " is not an ELF file";
    } else if (header->e_ident[EI_CLASS] != ELFCLASS64 || header->e_ident[EI_DATA] != ELFDATA2LSB ||
               header->e_shentsize != sizeof(Elf64_Shdr) || header->e_shoff > size_) {
      *error = path + " is not a 64-bit little-endian ELF file";
    } else {
      shoff_ = header->e_shoff;
      count_ = header->e_shoff ? header->e_shnum : 0;  // no section table at all
      names_ = header->e_shstrndx;
      // Extended numbering: the real values live in section 0.
      if (header->e_shoff != 0 && sizeof(Elf64_Shdr) <= size_ - header->e_shoff) {
        Elf64_Shdr first;
        memcpy(&first, file_ + shoff_, sizeof first);
        if (count_ == 0) count_ = first.sh_size;
        if (names_ == SHN_XINDEX) names_ = first.sh_link;
      }
      if (count_ > (size_ - header->e_shoff) / sizeof(Elf64_Shdr)) {
        *error = path + " is truncated (its section table runs past the end)";
        count_ = 0;
      } else {
        valid_ = true;
      }
    }
  }
  ~MappedElf() {
    if (file_ != nullptr) munmap(const_cast<char*>(file_), size_);
  }
  MappedElf(const MappedElf&) = delete;
  MappedElf& operator=(const MappedElf&) = delete;

  bool valid() const { return valid_; }
  size_t count() const { return count_; }
  size_t names() const { return names_; }
  // Section `index`'s header (copied: a corrupt file may misalign it), or nullopt.
  std::optional<Elf64_Shdr> section(size_t index) const {
    if (index >= count_) return std::nullopt;
    Elf64_Shdr header;
    memcpy(&header, file_ + shoff_ + index * sizeof header, sizeof header);
    return header;
  }

  // A section's bytes; empty when it has none in the file or they run past its end.
  std::string_view contents(const Elf64_Shdr& section) const {
    if (section.sh_type == SHT_NOBITS || section.sh_offset > size_ || section.sh_size > size_ - section.sh_offset)
      return {};
    return {file_ + section.sh_offset, section.sh_size};
  }

  // Entry `index` of a table section of T (copied: it may be misaligned), or nullopt.
  template <typename T>
  std::optional<T> entry(const Elf64_Shdr& table, size_t index) const {
    std::string_view bytes = contents(table);
    size_t size = table.sh_entsize ? table.sh_entsize : sizeof(T);
    if (size < sizeof(T) || index >= bytes.size() / size) return std::nullopt;
    T value;
    memcpy(&value, bytes.data() + index * size, sizeof value);
    return value;
  }
  template <typename T>
  size_t entries(const Elf64_Shdr& table) const {
    size_t size = table.sh_entsize ? table.sh_entsize : sizeof(T);
    return size < sizeof(T) ? 0 : contents(table).size() / size;
  }

  // The NUL-terminated string at `offset` of string table `index`, or nullptr.
  const char* string(size_t index, size_t offset) const {
    std::optional<Elf64_Shdr> table = section(index);
    if (!table) return nullptr;
    std::string_view bytes = contents(*table);
    if (offset >= bytes.size() || memchr(bytes.data() + offset, '\0', bytes.size() - offset) == nullptr) return nullptr;
    return bytes.data() + offset;
  }

 private:
  const char* file_ = nullptr;
  size_t size_ = 0;
  size_t shoff_ = 0, count_ = 0, names_ = 0;
  bool valid_ = false;
};

size_t align4(size_t n) { return (n + 3) & ~size_t{3}; }

std::string build_id_of(std::string_view notes) {
  for (size_t at = 0; sizeof(Elf64_Nhdr) <= notes.size() - at;) {
    Elf64_Nhdr note;
    memcpy(&note, notes.data() + at, sizeof note);
    size_t name = at + sizeof note;
    if (note.n_namesz > notes.size() - name) break;
    size_t desc = name + align4(note.n_namesz);
    if (desc > notes.size() || note.n_descsz > notes.size() - desc) break;
    if (note.n_type == NT_GNU_BUILD_ID && note.n_namesz == 4 && memcmp(notes.data() + name, "GNU", 4) == 0) {
      std::string text(2 * note.n_descsz + 1, '\0');
      hex_text(reinterpret_cast<const unsigned char*>(notes.data() + desc), note.n_descsz, text.data(), text.size());
      text.pop_back();
      return text;
    }
    if (align4(note.n_descsz) > notes.size() - desc) break;
    at = desc + align4(note.n_descsz);
  }
  return "";
}

void read_dynamic_symbols(const MappedElf& elf, const Elf64_Shdr& table, ElfFacts* facts) {
  for (size_t i = 1; i < elf.entries<Elf64_Sym>(table); ++i) {
    std::optional<Elf64_Sym> symbol = elf.entry<Elf64_Sym>(table, i);
    if (!symbol || symbol->st_shndx == SHN_UNDEF) continue;
    int binding = ELF64_ST_BIND(symbol->st_info), visibility = ELF64_ST_VISIBILITY(symbol->st_other);
    if (binding != STB_GLOBAL && binding != STB_WEAK) continue;
    if (visibility != STV_DEFAULT && visibility != STV_PROTECTED) continue;
    const char* name = elf.string(table.sh_link, symbol->st_name);
    if (name == nullptr) continue;
    facts->exported.insert(name);
    if (visibility == STV_PROTECTED) facts->protected_.insert(name);
  }
}

// Names the symbols that the relocations in `table` refer to.
void read_relocations(const MappedElf& elf, const Elf64_Shdr& table, ElfFacts* facts) {
  std::optional<Elf64_Shdr> symbols = elf.section(table.sh_link);
  if (!symbols) return;
  bool rela = table.sh_type == SHT_RELA;
  size_t count = rela ? elf.entries<Elf64_Rela>(table) : elf.entries<Elf64_Rel>(table);
  for (size_t i = 0; i < count; ++i) {
    size_t index = rela ? ELF64_R_SYM(elf.entry<Elf64_Rela>(table, i)->r_info)
                        : ELF64_R_SYM(elf.entry<Elf64_Rel>(table, i)->r_info);
    std::optional<Elf64_Sym> symbol = index ? elf.entry<Elf64_Sym>(*symbols, index) : std::nullopt;
    if (!symbol) continue;
    if (const char* name = elf.string(symbols->sh_link, symbol->st_name)) facts->relocated.insert(name);
  }
}

bool is_symbolic(const MappedElf& elf, const Elf64_Shdr& table) {
  for (size_t i = 0; i < elf.entries<Elf64_Dyn>(table); ++i) {
    std::optional<Elf64_Dyn> entry = elf.entry<Elf64_Dyn>(table, i);
    if (entry->d_tag == DT_SYMBOLIC) return true;
    if (entry->d_tag == DT_FLAGS && (entry->d_un.d_val & DF_SYMBOLIC)) return true;
  }
  return false;
}

}  // namespace

std::optional<ElfFacts> read_elf_facts(const std::string& path, std::string* error) {
  MappedElf elf(path, error);
  if (!elf.valid()) return std::nullopt;
  ElfFacts facts;
  for (size_t i = 0; i < elf.count(); ++i) {
    const Elf64_Shdr section = *elf.section(i);
    switch (section.sh_type) {
      case SHT_NOTE:
        if (facts.build_id.empty()) facts.build_id = build_id_of(elf.contents(section));
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

std::optional<std::string> read_elf_section(const std::string& path, const std::string& name, std::string* error) {
  MappedElf elf(path, error);
  if (!elf.valid()) return std::nullopt;
  for (size_t i = 0; i < elf.count(); ++i) {
    const Elf64_Shdr section = *elf.section(i);
    const char* section_name = elf.string(elf.names(), section.sh_name);
    if (section_name == nullptr || name != section_name) continue;
    std::string contents(elf.contents(section));
    while (!contents.empty() && contents.back() == '\0') contents.pop_back();
    return contents;
  }
  *error = path + " has no " + name + " section";
  return std::nullopt;
}

}  // namespace fsdpskip::cli
