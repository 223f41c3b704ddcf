// The objects the dynamic linker has loaded, and the functions they define,
// read from its own list (r_debug's link map) and the objects' dynamic
// symbol tables, without calling into the linker: dl_iterate_phdr, dlopen
// and dlsym take its locks, which fork does not reset, so a child forked
// while another thread held one would wait forever in its first lookup.
//
// Another thread may dlopen or dlclose meanwhile: every read of the list or
// of an object's tables is a copy that reports memory unmapped under it
// (process_vm_readv on this process; where the kernel or an emulator
// refuses that call, write(2) into a pipe, which fails with EFAULT; plain
// reads only where no pipe can be made), and a walk that saw the list change
// (r_state not RT_CONSISTENT before and after) is made again, a few times.
// Only the default namespace is read (torch is never loaded with dlmopen).
#pragma once

#include <stddef.h>
#include <stdint.h>

namespace fsdpskip {

// A loaded object whose file name starts with a library prefix, with what a
// symbol lookup in it needs, as read from its dynamic section.
struct LoadedLibrary {
  int prefix;             // which of the prefixes it matched
  uintptr_t base;         // l_addr: where its addresses are relative to
  uintptr_t symbols;      // DT_SYMTAB
  uintptr_t strings;      // DT_STRTAB
  size_t strings_size;    // DT_STRSZ
  uintptr_t gnu_hash;     // DT_GNU_HASH, or 0
  uintptr_t sysv_hash;    // DT_HASH, or 0
  uintptr_t versions;     // DT_VERSYM, or 0
  // Its RELA tables: the PLT's (DT_JMPREL, DT_PLTRELSZ) and the rest
  // (DT_RELA, DT_RELASZ); 0 where it has none.
  uintptr_t plt_relocations;
  size_t plt_relocations_size;
  uintptr_t relocations;
  size_t relocations_size;
};

// The loaded objects (never this preload) whose file name starts with one
// of `prefixes`, at most `capacity` of them, in load order. Returns how many.
int find_loaded_libraries(const char* const* prefixes, int prefix_count, LoadedLibrary* out, int capacity);

// The address of the function `name` defined and exported by `library`
// (its default version), or nullptr.
void* find_function(const LoadedLibrary& library, const char* name);

// The slots through which `library` calls the function `name` that it
// defines and exports itself (its GOT entries that JUMP_SLOT and GLOB_DAT
// relocations bind to that symbol: the calls a preload's definition
// interposes on), at most `capacity` of them. Returns how many.
int find_call_slots(const LoadedLibrary& library, const char* name, void** slots[], int capacity);

// find_function over every loaded object but this preload, the executable
// first; nullptr when none defines it.
void* find_function_anywhere(const char* name);

// The first loaded object whose file name starts with `prefix`: its path and
// its GNU build-id in hex ("" when it has none). False when none is loaded.
bool loaded_library_identity(const char* prefix, char* path, size_t path_size, char* build_id,
                             size_t build_id_size);

}  // namespace fsdpskip
