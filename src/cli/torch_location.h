// A torch installation as the command sees it from outside: found through a
// Python that imports it or a LibTorch directory, with its libraries and its
// CMake package. Shared by `fsdpskip doctor` and `fsdpskip plugin`.
#pragma once

#include <iterator>
#include <map>
#include <optional>
#include <string>

#include "../common/libraries.h"

namespace fsdpskip::cli {

struct Torch {
  std::string origin;                // how it was found
  std::string version = "unknown";
  std::string libraries[std::size(kLibraries)];  // by Library (libraries.h), "" when absent
  std::string cmake_prefix;          // the directory holding Torch/TorchConfig.cmake ("" when none)
};

inline const std::string& library_path(const Torch& torch, Library library) {
  return torch.libraries[static_cast<int>(library)];
}

// The torch that `python` imports; nullopt with the reason in `error`.
std::optional<Torch> torch_of_python(const std::string& python, const std::string& scratch, std::string* error);

// The LibTorch in `directory` (a LibTorch archive, a wheel's torch/ or
// torch/lib/, Debian's multiarch lib directory).
std::optional<Torch> torch_of_libtorch(const std::string& directory, std::string* error);

// The torch a subcommand was pointed at: --libtorch DIR when given, else --python PY.
inline std::optional<Torch> torch_of(const std::string& python, const std::string& libtorch,
                                     const std::string& scratch, std::string* error) {
  return libtorch.empty() ? torch_of_python(python, scratch, error) : torch_of_libtorch(libtorch, error);
}

// The environment for queries and probes: none of the variables the policy
// reads (options.def), no preload. FSDPSKIP_PLUGIN and XDG_CACHE_HOME stay:
// what is checked is the plugin the user would get.
std::map<std::string, std::string> clean_environment();

// A private directory under $TMPDIR, removed with everything in it.
class ScratchDirectory {
 public:
  explicit ScratchDirectory(const char* name);
  ~ScratchDirectory();
  ScratchDirectory(const ScratchDirectory&) = delete;
  ScratchDirectory& operator=(const ScratchDirectory&) = delete;
  const std::string& path() const { return path_; }  // "" when it could not be made

 private:
  std::string path_;
};

}  // namespace fsdpskip::cli
