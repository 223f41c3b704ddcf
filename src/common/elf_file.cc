#include "elf_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "torch_identity.h"

namespace fsdpskip {
const char* machine_name(uint16_t machine, char* out, size_t out_size) {
  switch (machine) {
    case EM_X86_64: snprintf(out, out_size, "x86-64"); break;
    case EM_AARCH64: snprintf(out, out_size, "AArch64"); break;
    default: snprintf(out, out_size, "ELF machine %u", machine);
  }
  return out;
}

ElfFile::ElfFile(const char* path) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);  // a FIFO must not block us
  if (fd < 0) {
    snprintf(problem_, sizeof problem_, "cannot be opened: %s", strerror(errno));
    return;
  }
  map(fd);
  close(fd);
}

ElfFile::ElfFile(int fd) { map(fd); }

ElfFile::~ElfFile() {
  if (file_ != nullptr) munmap(const_cast<char*>(file_), size_);
}

void ElfFile::map(int fd) {
  struct stat status;
  if (fstat(fd, &status) != 0 || !S_ISREG(status.st_mode)) {
    snprintf(problem_, sizeof problem_, "is not a regular file");
    return;
  }
  if (static_cast<size_t>(status.st_size) < sizeof(Elf64_Ehdr)) {
    snprintf(problem_, sizeof problem_, "is not an ELF file");
    return;
  }
  size_ = status.st_size;
  void* mapped = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  if (mapped == MAP_FAILED) {
    snprintf(problem_, sizeof problem_, "cannot be mapped: %s", strerror(errno));
    return;
  }
  file_ = static_cast<const char*>(mapped);
  check_headers();
}

void ElfFile::check_headers() {
  Elf64_Ehdr header;
  memcpy(&header, file_, sizeof header);
  if (memcmp(header.e_ident, ELFMAG, SELFMAG) != 0) {
    snprintf(problem_, sizeof problem_, "is not an ELF file");
    return;
  }
  if (header.e_ident[EI_CLASS] != ELFCLASS64 || header.e_ident[EI_DATA] != ELFDATA2LSB ||
      (header.e_shoff != 0 && header.e_shentsize != sizeof(Elf64_Shdr))) {
    snprintf(problem_, sizeof problem_, "is not a 64-bit little-endian ELF file");
    return;
  }
  if (header.e_shoff > size_) {
    snprintf(problem_, sizeof problem_, "is truncated (its section table runs past the end)");
    return;
  }
  section_table_ = header.e_shoff;
  count_ = header.e_shoff ? header.e_shnum : 0;  // no section table at all
  names_ = header.e_shstrndx;
  // Extended numbering: the real values live in section 0's header.
  if (header.e_shoff != 0 && sizeof(Elf64_Shdr) <= size_ - header.e_shoff) {
    Elf64_Shdr first;
    memcpy(&first, file_ + section_table_, sizeof first);
    if (count_ == 0) count_ = first.sh_size;
    if (names_ == SHN_XINDEX) names_ = first.sh_link;
  }
  // Compared as size - offset: sums from a corrupt file could wrap.
  if (count_ > (size_ - header.e_shoff) / sizeof(Elf64_Shdr)) {
    snprintf(problem_, sizeof problem_, "is truncated (its section table runs past the end)");
    count_ = 0;
    return;
  }
  machine_ = header.e_machine;
  // The program headers, where they lie inside the file (a file whose
  // headers were moved, as patchelf moves them, has them at its end).
  if (header.e_phoff != 0 && header.e_phentsize == sizeof(Elf64_Phdr) && header.e_phoff <= size_ &&
      header.e_phnum <= (size_ - header.e_phoff) / sizeof(Elf64_Phdr)) {
    program_table_ = header.e_phoff;
    program_count_ = header.e_phnum;
  }
}

bool ElfFile::program_header(size_t index, Elf64_Phdr* out) const {
  if (index >= program_count_) return false;
  memcpy(out, file_ + program_table_ + index * sizeof *out, sizeof *out);
  return true;
}

const char* ElfFile::problem_here() {
  if (problem_[0] == '\0' && machine_ != kThisMachine) {
    char file_machine[32], this_machine[32];
    snprintf(problem_, sizeof problem_, "is built for %s; this fsdpskip runs on %s",
             machine_name(machine_, file_machine, sizeof file_machine),
             machine_name(kThisMachine, this_machine, sizeof this_machine));
  }
  return problem();
}

bool ElfFile::section(size_t index, Elf64_Shdr* out) const {
  if (index >= count_) return false;
  memcpy(out, file_ + section_table_ + index * sizeof *out, sizeof *out);
  return true;
}

bool ElfFile::contents(const Elf64_Shdr& section, const char** bytes, size_t* size) const {
  if (section.sh_type == SHT_NOBITS || section.sh_offset > size_ || section.sh_size > size_ - section.sh_offset)
    return false;
  *bytes = file_ + section.sh_offset;
  *size = section.sh_size;
  return true;
}

const char* ElfFile::string(size_t table, size_t offset) const {
  Elf64_Shdr header;
  const char* bytes;
  size_t size;
  if (!section(table, &header) || !contents(header, &bytes, &size) || offset >= size ||
      memchr(bytes + offset, '\0', size - offset) == nullptr)
    return nullptr;
  return bytes + offset;
}

bool ElfFile::find_section(const char* name, Elf64_Shdr* out) const {
  for (size_t i = 0; i < count_; ++i) {
    if (!section(i, out)) return false;
    const char* found = string(names_, out->sh_name);
    if (found != nullptr && strcmp(found, name) == 0) return true;
  }
  return false;
}

bool ElfFile::section_text(const char* name, char* out, size_t out_size) const {
  Elf64_Shdr header;
  const char* bytes;
  size_t size;
  if (out_size == 0 || !find_section(name, &header) || !contents(header, &bytes, &size)) return false;
  while (size > 0 && bytes[size - 1] == '\0') --size;
  size_t count = size < out_size - 1 ? size : out_size - 1;
  memcpy(out, bytes, count);
  out[count] = '\0';
  return true;
}

void build_id_of_notes(const char* notes, size_t size, char* out, size_t out_size, size_t alignment) {
  if (out_size) out[0] = '\0';
  for (size_t at = 0; sizeof(Elf64_Nhdr) <= size - at;) {
    Elf64_Nhdr note;
    memcpy(&note, notes + at, sizeof note);
    size_t name = at + sizeof note;
    if (note.n_namesz > size - name) return;
    size_t description = name + note_padded(note.n_namesz, alignment);
    if (description > size || note.n_descsz > size - description) return;
    if (note.n_type == NT_GNU_BUILD_ID && note.n_namesz == 4 && memcmp(notes + name, "GNU", 4) == 0) {
      hex_text(reinterpret_cast<const unsigned char*>(notes + description), note.n_descsz, out, out_size);
      return;
    }
    if (note_padded(note.n_descsz, alignment) > size - description) return;
    at = description + note_padded(note.n_descsz, alignment);
  }
}

}  // namespace fsdpskip
