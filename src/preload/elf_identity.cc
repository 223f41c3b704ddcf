#include "elf_identity.h"

#include "../common/torch_identity.h"

#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace fsdpskip {
namespace {

struct Search {
  const char* prefix;
  char* path;
  size_t path_size;
  char* build_id;
  size_t build_id_size;
  bool found;
};

size_t align4(size_t n) { return (n + 3) & ~size_t{3}; }

// Walks the PT_NOTE segments as mapped in memory.
void find_build_id(const struct dl_phdr_info* info, char* out, size_t out_size) {
  out[0] = '\0';
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& segment = info->dlpi_phdr[i];
    if (segment.p_type != PT_NOTE) continue;
    const char* note = reinterpret_cast<const char*>(info->dlpi_addr + segment.p_vaddr);
    const char* end = note + segment.p_memsz;
    while (note + sizeof(ElfW(Nhdr)) <= end) {
      const auto* header = reinterpret_cast<const ElfW(Nhdr)*>(note);
      const char* name = note + sizeof *header;
      const char* desc = name + align4(header->n_namesz);
      if (desc + header->n_descsz > end) break;
      if (header->n_type == NT_GNU_BUILD_ID && header->n_namesz == 4 && memcmp(name, "GNU", 4) == 0) {
        hex_text(reinterpret_cast<const unsigned char*>(desc), header->n_descsz, out, out_size);
        return;
      }
      note = desc + align4(header->n_descsz);
    }
  }
}

int visit(struct dl_phdr_info* info, size_t, void* data) {
  auto* search = static_cast<Search*>(data);
  const char* name = info->dlpi_name;
  if (name == nullptr || *name == '\0') return 0;
  const char* slash = strrchr(name, '/');
  const char* base = slash ? slash + 1 : name;
  if (strncmp(base, search->prefix, strlen(search->prefix)) != 0) return 0;
  snprintf(search->path, search->path_size, "%s", name);
  find_build_id(info, search->build_id, search->build_id_size);
  search->found = true;
  return 1;
}

}  // namespace

bool loaded_library_identity(const char* prefix, char* path, size_t path_size, char* build_id,
                             size_t build_id_size) {
  Search search{prefix, path, path_size, build_id, build_id_size, false};
  dl_iterate_phdr(visit, &search);
  return search.found;
}

bool read_file_section(const char* path, const char* name, char* out, size_t out_size) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);  // a FIFO must not block us
  if (fd < 0) return false;
  bool found = read_fd_section(fd, name, out, out_size);
  close(fd);
  return found;
}

bool read_fd_section(int fd, const char* name, char* out, size_t out_size) {
  struct stat status;
  bool found = false;
  if (fstat(fd, &status) == 0 && S_ISREG(status.st_mode) && static_cast<size_t>(status.st_size) >= sizeof(Elf64_Ehdr)) {
    size_t size = status.st_size;
    void* mapped = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (mapped != MAP_FAILED) {
      const char* file = static_cast<const char*>(mapped);
      const auto* elf = reinterpret_cast<const Elf64_Ehdr*>(file);
      // Every offset + size is compared as size - offset: sums from a corrupt file could wrap.
      bool valid = memcmp(elf->e_ident, ELFMAG, SELFMAG) == 0 && elf->e_ident[EI_CLASS] == ELFCLASS64 &&
                   elf->e_shentsize == sizeof(Elf64_Shdr) && elf->e_shstrndx < elf->e_shnum &&
                   elf->e_shoff <= size && size_t{elf->e_shnum} <= (size - elf->e_shoff) / sizeof(Elf64_Shdr);
      if (valid) {
        // Headers are copied out: a corrupt file may put them at any alignment.
        auto header = [&](size_t index) {
          Elf64_Shdr copy;
          memcpy(&copy, file + elf->e_shoff + index * sizeof copy, sizeof copy);
          return copy;
        };
        const Elf64_Shdr names = header(elf->e_shstrndx);
        bool names_fit = names.sh_offset <= size && names.sh_size <= size - names.sh_offset;
        for (int i = 0; i < elf->e_shnum && !found && names_fit; ++i) {
          const Elf64_Shdr section = header(i);
          if (section.sh_name >= names.sh_size || section.sh_type == SHT_NOBITS) continue;
          const char* section_name = file + names.sh_offset + section.sh_name;
          if (strncmp(section_name, name, names.sh_size - section.sh_name) != 0) continue;
          if (section.sh_offset > size || section.sh_size > size - section.sh_offset) break;
          size_t count = section.sh_size < out_size - 1 ? section.sh_size : out_size - 1;
          memcpy(out, file + section.sh_offset, count);
          out[count] = '\0';
          found = true;
        }
      }
      munmap(mapped, size);
    }
  }
  return found;
}

}  // namespace fsdpskip
