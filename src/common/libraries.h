// The torch-side libraries fsdpskip looks into, named by their soname
// prefix: where the preload finds the originals of the hook table's rows and
// which files the doctor reads. Header-only and freestanding (the preload
// has no C++ runtime).
#pragma once

namespace fsdpskip {

// libtorch_python defines no row: it calls one (broadcast_coalesced, from
// Python's binding), so the doctor reads its relocations too.
enum class Library { kTorchCpu, kC10, kTorchCuda, kNccl, kTorchPython };

inline constexpr Library kLibraries[] = {Library::kTorchCpu, Library::kC10, Library::kTorchCuda, Library::kNccl,
                                         Library::kTorchPython};

// "libtorch_cpu.so", ...: the prefix of the soname and of the file's name.
inline const char* library_prefix(Library library) {
  constexpr const char* kPrefixes[] = {"libtorch_cpu.so", "libc10.so", "libtorch_cuda.so", "libnccl.so",
                                       "libtorch_python.so"};
  return kPrefixes[static_cast<int>(library)];
}

}  // namespace fsdpskip
