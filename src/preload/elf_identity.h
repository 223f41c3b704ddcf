// Identities of ELF objects, read without libelf (the preload needs glibc
// alone): the GNU build-id of a loaded library, and a named section of a file.
#pragma once

#include <stddef.h>

namespace fsdpskip {

// Finds the first loaded object whose file name starts with `prefix` and
// writes its path and its build-id in hex. False when none is loaded; the
// build-id is "" when the object has none.
bool loaded_library_identity(const char* prefix, char* path, size_t path_size, char* build_id,
                             size_t build_id_size);

// Copies the contents of section `name` of the ELF file at `path` into `out`
// (NUL-terminated, truncated to out_size - 1). False when unreadable, not a
// regular file (never blocks on a FIFO) or absent.
bool read_file_section(const char* path, const char* name, char* out, size_t out_size);

// The same, from an open file (left open).
bool read_fd_section(int fd, const char* name, char* out, size_t out_size);

}  // namespace fsdpskip
