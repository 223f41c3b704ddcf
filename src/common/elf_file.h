// The one reader of ELF files on disk, for the preload (a plugin, before it
// is loaded) and the command (the doctor, `plugin list`, `plugin build`):
// 64-bit little-endian files, mapped read-only, every access checked against
// the file's size, so that a truncated, corrupt or hostile file is a clause
// of text, never a crash (tools/fuzz: fuzz_elf_file). Freestanding: the
// preload has no C++ runtime, so nothing here allocates or throws.
#pragma once

#include <elf.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

namespace fsdpskip {

// The ELF machine of the code being built: a file of any other is refused.
#if defined(__x86_64__)
inline constexpr uint16_t kThisMachine = EM_X86_64;
#elif defined(__aarch64__)
inline constexpr uint16_t kThisMachine = EM_AARCH64;
#else
#error "fsdpskip is built and tested for x86-64 and AArch64 only"
#endif

// "x86-64", "AArch64", "ELF machine 40", into `out`; returns out.
const char* machine_name(uint16_t machine, char* out, size_t out_size);

class ElfFile {
 public:
  // Maps `path` (a FIFO or a device is never opened: only a regular file).
  explicit ElfFile(const char* path);
  // Maps the open file `fd` (left open).
  explicit ElfFile(int fd);
  ~ElfFile();
  ElfFile(const ElfFile&) = delete;
  ElfFile& operator=(const ElfFile&) = delete;

  // nullptr when the file is a 64-bit little-endian ELF file whose section
  // table lies inside it; else why not, as a clause ("is not an ELF file").
  const char* problem() const { return problem_[0] ? problem_ : nullptr; }
  // e_machine (EM_X86_64, EM_AARCH64, ...); 0 when problem().
  uint16_t machine() const { return machine_; }
  // The same problem() for a file of another architecture than this build's:
  // "is built for AArch64; this fsdpskip runs on x86-64".
  const char* problem_here();

  // Program header `index` (copied), as the file has it: where the segments
  // lie in memory, relative to the object's base.
  size_t program_header_count() const { return program_count_; }
  bool program_header(size_t index, Elf64_Phdr* out) const;

  size_t section_count() const { return count_; }
  // Section `index`'s header (copied: a corrupt file may misalign it).
  bool section(size_t index, Elf64_Shdr* out) const;
  // A section's bytes; false when it has none in the file or they run past its end.
  bool contents(const Elf64_Shdr& section, const char** bytes, size_t* size) const;
  // The NUL-terminated string at `offset` of string table section `table`, or nullptr.
  const char* string(size_t table, size_t offset) const;
  // The first section named `name`.
  bool find_section(const char* name, Elf64_Shdr* out) const;
  // Copies section `name`'s bytes into `out` (NUL-terminated, cut to
  // out_size - 1, trailing NULs dropped); false when there is none.
  bool section_text(const char* name, char* out, size_t out_size) const;

  // Table sections (symbols, relocations, dynamic entries): entry `index`
  // of type T (copied), and how many there are.
  template <typename T>
  size_t entries(const Elf64_Shdr& table) const {
    const char* bytes;
    size_t size, width = table.sh_entsize ? table.sh_entsize : sizeof(T);
    return width >= sizeof(T) && contents(table, &bytes, &size) ? size / width : 0;
  }
  template <typename T>
  bool entry(const Elf64_Shdr& table, size_t index, T* out) const {
    const char* bytes;
    size_t size, width = table.sh_entsize ? table.sh_entsize : sizeof(T);
    if (width < sizeof(T) || !contents(table, &bytes, &size) || index >= size / width) return false;
    memcpy(out, bytes + index * width, sizeof *out);
    return true;
  }

 private:
  void map(int fd);
  void check_headers();

  const char* file_ = nullptr;
  size_t size_ = 0;
  size_t section_table_ = 0, count_ = 0, names_ = 0;
  size_t program_table_ = 0, program_count_ = 0;
  uint16_t machine_ = 0;
  char problem_[160] = "";
};

// The GNU build-id note among the notes [notes, notes + size), as lower-case
// hex in `out`; "" when there is none. The notes may be a file's SHT_NOTE
// section or a loaded object's PT_NOTE segment; `alignment` is its own (8
// where the notes are padded to 8 bytes, as a segment that holds aarch64's
// .note.gnu.property is: PyPI's aarch64 torch), else 4.
void build_id_of_notes(const char* notes, size_t size, char* out, size_t out_size, size_t alignment = 4);

// The size of a note's name or description padded to `alignment` (4 or 8).
inline size_t note_padded(size_t n, size_t alignment) {
  size_t unit = alignment == 8 ? 8 : 4;
  return (n + unit - 1) & ~(unit - 1);
}

}  // namespace fsdpskip
