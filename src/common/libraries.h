// The torch-side libraries fsdpskip looks into, named by their soname
// prefix: where the preload finds the originals of the hook table's rows and
// which files the doctor reads. Header-only and freestanding (the preload
// has no C++ runtime).
#pragma once

namespace fsdpskip {

enum class Library { kTorchCpu, kC10, kTorchCuda, kNccl };

inline constexpr Library kLibraries[] = {Library::kTorchCpu, Library::kC10, Library::kTorchCuda, Library::kNccl};

// "libtorch_cpu.so", ...: the prefix of the soname and of the file's name.
inline const char* library_prefix(Library library) {
  constexpr const char* kPrefixes[] = {"libtorch_cpu.so", "libc10.so", "libtorch_cuda.so", "libnccl.so"};
  return kPrefixes[static_cast<int>(library)];
}

}  // namespace fsdpskip
