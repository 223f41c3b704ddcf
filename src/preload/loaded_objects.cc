#include "loaded_objects.h"

#include <elf.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <sched.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "../common/elf_file.h"
#include "../common/torch_identity.h"

namespace fsdpskip {
namespace {

// The public part of glibc's struct link_map, which <link.h> declares and
// which has been the same since SVR4.
struct Node {
  ElfW(Addr) base;
  uintptr_t name;
  uintptr_t dynamic;
  uintptr_t next;
  uintptr_t previous;
};
static_assert(offsetof(struct link_map, l_addr) == offsetof(Node, base) &&
              offsetof(struct link_map, l_name) == offsetof(Node, name) &&
              offsetof(struct link_map, l_ld) == offsetof(Node, dynamic) &&
              offsetof(struct link_map, l_next) == offsetof(Node, next) &&
              offsetof(struct link_map, l_prev) == offsetof(Node, previous),
              "struct link_map's public members");

constexpr int kMaxObjects = 1 << 16;       // a cycle in a list read while it changed ends here
constexpr int kMaxDynamicEntries = 1024;
constexpr int kAttempts = 4;              // walks of a list seen changing
constexpr size_t kBaseNameSize = 48;      // enough for any library prefix

// How this process's memory is read so that an unmapped address is an
// error, never a fault: process_vm_readv on itself; where that is refused
// (qemu-user has no such call; a seccomp filter may forbid it), through a
// pipe, whose write(2) reports an unmapped source with EFAULT; where no pipe
// can be made (no descriptor left), plain reads.
enum class ReadMode { kUnknown, kSystemCall, kPipe };
ReadMode g_read_mode = ReadMode::kUnknown;

bool copy_with_system_call(pid_t pid, void* out, uintptr_t address, size_t size) {
  struct iovec local = {out, size}, remote = {reinterpret_cast<void*>(address), size};
  return process_vm_readv(pid, &local, 1, &remote, 1, 0) == static_cast<ssize_t>(size);
}

ReadMode read_mode(pid_t pid) {
  ReadMode mode = __atomic_load_n(&g_read_mode, __ATOMIC_RELAXED);
  if (mode != ReadMode::kUnknown) return mode;
  static const int kProbe = 1;
  int copy = 0;
  mode = copy_with_system_call(pid, &copy, reinterpret_cast<uintptr_t>(&kProbe), sizeof copy) && copy == 1
             ? ReadMode::kSystemCall
             : ReadMode::kPipe;
  __atomic_store_n(&g_read_mode, mode, __ATOMIC_RELAXED);
  return mode;
}

// Reads of this process's memory for one operation (the pid is looked up
// once per operation: after a fork it is the child's own), through a pipe of
// its own where the system call is refused.
class Reader {
 public:
  Reader() : pid_(getpid()), mode_(read_mode(pid_)) {
    if (mode_ == ReadMode::kPipe && pipe2(pipe_, O_CLOEXEC) != 0) pipe_[0] = pipe_[1] = -1;
  }
  ~Reader() {
    if (pipe_[0] >= 0) close(pipe_[0]), close(pipe_[1]);
  }
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  bool read(void* out, uintptr_t address, size_t size) const {
    if (address == 0) return false;
    if (mode_ == ReadMode::kSystemCall) return copy_with_system_call(pid_, out, address, size);
    if (pipe_[0] < 0) {
      memcpy(out, reinterpret_cast<const void*>(address), size);
      return true;
    }
    auto* into = static_cast<char*>(out);
    for (size_t done = 0; done < size;) {  // a pipe holds at least PIPE_BUF bytes at once
      size_t chunk = size - done < PIPE_BUF ? size - done : PIPE_BUF;
      ssize_t wrote = write(pipe_[1], reinterpret_cast<const void*>(address + done), chunk);
      if (wrote <= 0) return false;
      for (ssize_t got = 0; got < wrote;) {
        ssize_t n = ::read(pipe_[0], into + done + got, wrote - got);
        if (n <= 0) return false;
        got += n;
      }
      if (static_cast<size_t>(wrote) < chunk) return false;
      done += chunk;
    }
    return true;
  }
  template <typename T>
  bool read(T* out, uintptr_t address) const {
    return read(out, address, sizeof *out);
  }

 private:
  pid_t pid_;
  ReadMode mode_;
  int pipe_[2] = {-1, -1};
};

int list_state() { return __atomic_load_n(&_r_debug.r_state, __ATOMIC_ACQUIRE); }

// The file name's last component (its first kBaseNameSize - 1 bytes), read
// from a NUL-terminated name at `address`.
bool read_base_name(const Reader& reader, uintptr_t address, char* base_name) {
  base_name[0] = '\0';
  size_t used = 0;
  char chunk[64];
  for (size_t at = 0; at < PATH_MAX; at += sizeof chunk) {
    // A chunk may cross into an unmapped page: then byte by byte.
    size_t got = sizeof chunk;
    if (!reader.read(chunk, address + at, sizeof chunk)) {
      for (got = 0; got < sizeof chunk && reader.read(&chunk[got], address + at + got, 1); ++got) {
      }
      if (got == 0) return false;
    }
    for (size_t i = 0; i < got; ++i) {
      if (chunk[i] == '\0') {
        base_name[used] = '\0';
        return true;
      }
      if (chunk[i] == '/') used = 0;
      else if (used < kBaseNameSize - 1) base_name[used++] = chunk[i];
    }
    if (got < sizeof chunk) return false;
  }
  return false;
}

// A dynamic-section address as the linker left it: glibc relocates them in
// place on these architectures, the vDSO's are offsets.
uintptr_t relocated(uintptr_t value, uintptr_t base) { return value < base ? value + base : value; }

bool read_dynamic(const Reader& reader, const Node& node, LoadedLibrary* library) {
  *library = LoadedLibrary{0, node.base, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  ElfW(Dyn) entries[16];
  for (int read = 0; read < kMaxDynamicEntries; read += 16) {
    if (!reader.read(entries, node.dynamic + read * sizeof(ElfW(Dyn)), sizeof entries)) {
      // The section may end just before an unmapped page: entry by entry.
      int got = 0;
      while (got < 16 && reader.read(&entries[got], node.dynamic + (read + got) * sizeof(ElfW(Dyn)))) ++got;
      if (got < 16) entries[got].d_tag = DT_NULL;
    }
    for (const ElfW(Dyn)& entry : entries) {
      switch (entry.d_tag) {
        case DT_NULL: return library->symbols && library->strings && (library->gnu_hash || library->sysv_hash);
        case DT_SYMTAB: library->symbols = relocated(entry.d_un.d_ptr, node.base); break;
        case DT_STRTAB: library->strings = relocated(entry.d_un.d_ptr, node.base); break;
        case DT_STRSZ: library->strings_size = entry.d_un.d_val; break;
        case DT_GNU_HASH: library->gnu_hash = relocated(entry.d_un.d_ptr, node.base); break;
        case DT_HASH: library->sysv_hash = relocated(entry.d_un.d_ptr, node.base); break;
        case DT_VERSYM: library->versions = relocated(entry.d_un.d_ptr, node.base); break;
        case DT_JMPREL: library->plt_relocations = relocated(entry.d_un.d_ptr, node.base); break;
        case DT_PLTRELSZ: library->plt_relocations_size = entry.d_un.d_val; break;
        case DT_RELA: library->relocations = relocated(entry.d_un.d_ptr, node.base); break;
        case DT_RELASZ: library->relocations_size = entry.d_un.d_val; break;
      }
    }
  }
  return false;
}

// Calls visit(node, base_name) for each object in the list but this preload;
// visit returns false to stop. Returns false when the list changed meanwhile.
template <typename Visit>
bool walk(const Reader& reader, Visit visit) {
  int before = list_state();
  uintptr_t at = reinterpret_cast<uintptr_t>(__atomic_load_n(&_r_debug.r_map, __ATOMIC_ACQUIRE));
  char base_name[kBaseNameSize];
  for (int count = 0; at != 0 && count < kMaxObjects; ++count) {
    Node node;
    if (!reader.read(&node, at)) break;
    at = node.next;
    if (node.dynamic == reinterpret_cast<uintptr_t>(_DYNAMIC)) continue;  // ourselves
    if (node.name == 0 || !read_base_name(reader, node.name, base_name)) base_name[0] = '\0';
    if (!visit(node, base_name)) break;
  }
  return before == r_debug::RT_CONSISTENT && list_state() == r_debug::RT_CONSISTENT;
}

// Runs `operation` (a walk) until it saw the list unchanged, or kAttempts
// times: a lookup made from inside dlopen (a library's constructor calling
// into torch) sees RT_ADD throughout, and must not wait for it.
template <typename Operation>
void consistently(Operation operation) {
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    if (operation()) return;
    sched_yield();
  }
}

bool has_prefix(const char* base_name, const char* prefix) { return strncmp(base_name, prefix, strlen(prefix)) == 0; }

uint32_t gnu_hash_of(const char* name) {
  uint32_t hash = 5381;
  for (const unsigned char* c = reinterpret_cast<const unsigned char*>(name); *c; ++c) hash = hash * 33 + *c;
  return hash;
}

uint32_t sysv_hash_of(const char* name) {
  uint32_t hash = 0;
  for (const unsigned char* c = reinterpret_cast<const unsigned char*>(name); *c; ++c) {
    hash = (hash << 4) + *c;
    uint32_t high = hash & 0xf0000000u;
    if (high) hash ^= high >> 24;
    hash &= ~high;
  }
  return hash;
}

// Symbol `index` of `library` when it is `name`, a function it defines and
// exports under its default version: its address, else 0.
uintptr_t match(const Reader& reader, const LoadedLibrary& library, uint32_t index, const char* name) {
  ElfW(Sym) symbol;
  if (!reader.read(&symbol, library.symbols + index * sizeof symbol)) return 0;
  size_t length = strlen(name) + 1;
  if (symbol.st_shndx == SHN_UNDEF || ELF64_ST_TYPE(symbol.st_info) != STT_FUNC ||
      (ELF64_ST_BIND(symbol.st_info) != STB_GLOBAL && ELF64_ST_BIND(symbol.st_info) != STB_WEAK) ||
      ELF64_ST_VISIBILITY(symbol.st_other) == STV_HIDDEN || ELF64_ST_VISIBILITY(symbol.st_other) == STV_INTERNAL ||
      (library.strings_size && (symbol.st_name >= library.strings_size || length > library.strings_size - symbol.st_name)))
    return 0;
  char text[256];
  if (length > sizeof text || !reader.read(text, library.strings + symbol.st_name, length) ||
      memcmp(text, name, length) != 0)
    return 0;
  ElfW(Half) version = 1;
  if (library.versions && !reader.read(&version, library.versions + index * sizeof version)) return 0;
  if (version & 0x8000) return 0;  // a hidden, non-default version (name@VERSION)
  return library.base + symbol.st_value;
}

// The look-ups return the symbol's address, and its index in `*index`.
uintptr_t look_up_gnu(const Reader& reader, const LoadedLibrary& library, const char* name, uint32_t* index_out) {
  struct {
    uint32_t buckets, first_symbol, bloom_words, bloom_shift;
  } header;
  if (!reader.read(&header, library.gnu_hash) || header.buckets == 0 || header.bloom_words == 0 ||
      (header.bloom_words & (header.bloom_words - 1)) != 0)
    return 0;
  constexpr uint32_t kBits = sizeof(ElfW(Addr)) * 8;
  uint32_t hash = gnu_hash_of(name);
  uintptr_t bloom = library.gnu_hash + sizeof header;
  ElfW(Addr) word;
  if (!reader.read(&word, bloom + ((hash / kBits) & (header.bloom_words - 1)) * sizeof word)) return 0;
  ElfW(Addr) mask = (ElfW(Addr){1} << (hash % kBits)) | (ElfW(Addr){1} << ((hash >> header.bloom_shift) % kBits));
  if ((word & mask) != mask) return 0;  // certainly not here
  uintptr_t buckets = bloom + size_t{header.bloom_words} * sizeof word;
  uint32_t index;
  if (!reader.read(&index, buckets + (hash % header.buckets) * sizeof index) || index < header.first_symbol) return 0;
  uintptr_t chain = buckets + size_t{header.buckets} * sizeof index;
  for (int step = 0; step < (1 << 20); ++step, ++index) {
    uint32_t chained;
    if (!reader.read(&chained, chain + size_t{index - header.first_symbol} * sizeof chained)) return 0;
    if ((chained | 1) == (hash | 1))
      if (uintptr_t address = match(reader, library, index, name)) return *index_out = index, address;
    if (chained & 1) return 0;  // the end of this bucket's chain
  }
  return 0;
}

uintptr_t look_up_sysv(const Reader& reader, const LoadedLibrary& library, const char* name, uint32_t* index_out) {
  uint32_t sizes[2];  // nbucket, nchain
  if (!reader.read(sizes, library.sysv_hash, sizeof sizes) || sizes[0] == 0) return 0;
  uint32_t index;
  uintptr_t buckets = library.sysv_hash + sizeof sizes;
  if (!reader.read(&index, buckets + (sysv_hash_of(name) % sizes[0]) * sizeof index)) return 0;
  uintptr_t chain = buckets + size_t{sizes[0]} * sizeof index;
  for (uint32_t step = 0; index != STN_UNDEF && index < sizes[1] && step < sizes[1]; ++step) {
    if (uintptr_t address = match(reader, library, index, name)) return *index_out = index, address;
    if (!reader.read(&index, chain + size_t{index} * sizeof index)) return 0;
  }
  return 0;
}

void* look_up(const Reader& reader, const LoadedLibrary& library, const char* name, uint32_t* index = nullptr) {
  uint32_t unused;
  if (index == nullptr) index = &unused;
  uintptr_t address =
      library.gnu_hash ? look_up_gnu(reader, library, name, index) : look_up_sysv(reader, library, name, index);
  return reinterpret_cast<void*>(address);
}

#if defined(__x86_64__)
constexpr uint32_t kJumpSlot = R_X86_64_JUMP_SLOT, kGlobalData = R_X86_64_GLOB_DAT;
#elif defined(__aarch64__)
constexpr uint32_t kJumpSlot = R_AARCH64_JUMP_SLOT, kGlobalData = R_AARCH64_GLOB_DAT;
#endif

// Appends to `slots` the GOT entries of `table` (RELA entries, `size` bytes)
// that bind symbol `index`.
void add_call_slots(const Reader& reader, const LoadedLibrary& library, uintptr_t table, size_t size, uint32_t index,
                    void** slots[], int capacity, int* count) {
  ElfW(Rela) chunk[256];
  size_t total = size / sizeof(ElfW(Rela));
  for (size_t at = 0; at < total && *count < capacity; at += sizeof chunk / sizeof chunk[0]) {
    size_t n = total - at < sizeof chunk / sizeof chunk[0] ? total - at : sizeof chunk / sizeof chunk[0];
    if (!reader.read(chunk, table + at * sizeof(ElfW(Rela)), n * sizeof(ElfW(Rela)))) return;
    for (size_t i = 0; i < n && *count < capacity; ++i) {
      uint32_t type = ELF64_R_TYPE(chunk[i].r_info);
      if (ELF64_R_SYM(chunk[i].r_info) == index && (type == kJumpSlot || type == kGlobalData))
        slots[(*count)++] = reinterpret_cast<void**>(library.base + chunk[i].r_offset);
    }
  }
}

// The GNU build-id of the object loaded from `path` at `base`: its PT_NOTE
// segments as its file's program headers give them (the ELF header and
// program headers need not be mapped: patchelf, which PyPI's wheels go
// through, moves them to the end of the file), the notes read from the
// loaded object's own memory, note by note.
void read_build_id(const Reader& reader, const char* path, uintptr_t base, char* out, size_t out_size) {
  if (out_size) out[0] = '\0';
  ElfFile file(path);
  if (file.problem() != nullptr) return;
  for (size_t i = 0; i < file.program_header_count(); ++i) {
    Elf64_Phdr segment;
    if (!file.program_header(i, &segment) || segment.p_type != PT_NOTE) continue;
    for (size_t at = 0; at + sizeof(ElfW(Nhdr)) <= segment.p_memsz;) {
      ElfW(Nhdr) note;
      char name[4];
      unsigned char description[64];
      uintptr_t address = base + segment.p_vaddr + at;
      if (!reader.read(&note, address)) break;
      size_t description_at = sizeof note + note_padded(note.n_namesz, segment.p_align);
      if (note.n_type == NT_GNU_BUILD_ID && note.n_namesz == 4 && note.n_descsz <= sizeof description &&
          reader.read(name, address + sizeof note, sizeof name) && memcmp(name, "GNU", 4) == 0 &&
          reader.read(description, address + description_at, note.n_descsz)) {
        hex_text(description, note.n_descsz, out, out_size);
        return;
      }
      at += description_at + note_padded(note.n_descsz, segment.p_align);
    }
  }
}

}  // namespace

int find_loaded_libraries(const char* const* prefixes, int prefix_count, LoadedLibrary* out, int capacity) {
  Reader reader;
  int count = 0;
  consistently([&] {
    count = 0;
    return walk(reader, [&](const Node& node, const char* base_name) {
      for (int prefix = 0; prefix < prefix_count && count < capacity; ++prefix) {
        if (!has_prefix(base_name, prefixes[prefix])) continue;
        if (read_dynamic(reader, node, &out[count])) out[count++].prefix = prefix;
        break;
      }
      return count < capacity;
    });
  });
  return count;
}

void* find_function(const LoadedLibrary& library, const char* name) {
  Reader reader;
  return look_up(reader, library, name);
}

int find_call_slots(const LoadedLibrary& library, const char* name, void** slots[], int capacity) {
  Reader reader;
  uint32_t index = 0;
  if (look_up(reader, library, name, &index) == nullptr) return 0;
  int count = 0;
  add_call_slots(reader, library, library.plt_relocations, library.plt_relocations_size, index, slots, capacity, &count);
  add_call_slots(reader, library, library.relocations, library.relocations_size, index, slots, capacity, &count);
  return count;
}

void* find_function_anywhere(const char* name) {
  Reader reader;
  void* address = nullptr;
  consistently([&] {
    bool unchanged = walk(reader, [&](const Node& node, const char*) {
      LoadedLibrary library;
      if (read_dynamic(reader, node, &library)) address = look_up(reader, library, name);
      return address == nullptr;
    });
    return address != nullptr || unchanged;  // found in an object's own table: right whatever else changed
  });
  return address;
}

bool loaded_library_identity(const char* prefix, char* path, size_t path_size, char* build_id, size_t build_id_size) {
  Reader reader;
  bool found = false;
  consistently([&] {
    found = false;
    return walk(reader, [&](const Node& node, const char* base_name) {
      if (!has_prefix(base_name, prefix)) return true;
      size_t length = 0;  // the whole path, cut to path_size - 1
      while (length + 1 < path_size && reader.read(&path[length], node.name + length, 1) && path[length] != '\0')
        ++length;
      path[length] = '\0';
      read_build_id(reader, path, node.base, build_id, build_id_size);
      found = true;
      return false;
    });
  });
  return found;
}

}  // namespace fsdpskip
