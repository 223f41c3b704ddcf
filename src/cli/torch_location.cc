#include "torch_location.h"

#include <stdlib.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <vector>

#include "../common/options_table.h"
#include "json_fields.h"
#include "platform.h"
#include "subprocess.h"

namespace fsdpskip::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr char kLocateTorch[] = R"(
import json, os, sys, torch, torch.utils
found = {}
for line in open("/proc/self/maps"):
    path = line.split()[-1] if len(line.split()) >= 6 else ""
    for name in sys.argv[1:]:
        if os.path.basename(path).startswith(name):
            found.setdefault(name, path)
print(json.dumps({"version": torch.__version__, "libraries": found, "cmake_prefix": torch.utils.cmake_prefix_path}))
)";

// The first file in `directory` named `name` or `name`.<version>.
std::string find_library_in(const std::string& directory, const std::string& name) {
  std::error_code failure;
  if (fs::exists(directory + "/" + name, failure)) return fs::canonical(directory + "/" + name, failure).string();
  for (const auto& entry : fs::directory_iterator(directory, failure))
    if (entry.path().filename().string().rfind(name + ".", 0) == 0) return entry.path().string();
  return "";
}

}  // namespace

std::optional<Torch> torch_of_python(const std::string& python, const std::string& scratch, std::string* error) {
  std::vector<std::string> argv = {python, "-c", kLocateTorch};
  for (Library library : kLibraries) argv.push_back(library_prefix(library));
  Finished query = run_program(argv, clean_environment(), scratch, 120);
  if (query.status != 0) {
    std::string why = query.err;
    while (!why.empty() && why.back() == '\n') why.pop_back();
    why = why.substr(why.rfind('\n') + 1);  // the exception's line
    *error = python + " cannot import torch (" + (why.empty() ? "exit " + std::to_string(query.status) : why) +
             "): name a Python with torch (--python) or a LibTorch directory (--libtorch)";
    return std::nullopt;
  }
  json answer = json::parse(query.out, nullptr, false);
  if (!answer.is_object() || !answer.contains("libraries") || !answer["libraries"].is_object()) {
    *error = python + " ran but did not answer as a Python with torch would (got: " + query.out.substr(0, 80) + ")";
    return std::nullopt;
  }
  Torch torch;
  torch.origin = "python " + python;
  torch.version = text_field(answer, "version", "unknown");
  torch.cmake_prefix = text_field(answer, "cmake_prefix", "");
  for (Library library : kLibraries)
    torch.libraries[static_cast<int>(library)] = text_field(answer["libraries"], library_prefix(library), "");
  if (library_path(torch, Library::kTorchCpu).empty()) {
    *error = python + " imported torch " + torch.version + " but no libtorch_cpu.so was mapped";
    return std::nullopt;
  }
  return torch;
}

std::optional<Torch> torch_of_libtorch(const std::string& directory, std::string* error) {
  Torch torch;
  torch.origin = "libtorch " + directory;
  std::string lib;
  // A prefix such as /usr keeps them in lib/<multiarch triplet>/ on Debian.
  std::string multiarch = this_platform().multiarch;
  std::vector<std::string> subdirectories = {"/lib", ""};
  if (!multiarch.empty()) subdirectories.push_back("/lib/" + multiarch);
  subdirectories.push_back("/lib64");
  std::string looked;
  for (const std::string& sub : subdirectories) {
    std::string candidate = directory + sub;
    looked += (looked.empty() ? "" : ", ") + (sub.empty() ? std::string("./") : sub.substr(1) + "/");
    if (!find_library_in(candidate, "libtorch_cpu.so").empty()) {
      lib = candidate;
      break;
    }
  }
  if (lib.empty()) {
    *error = "no libtorch_cpu.so under " + directory + " (looked in " + looked + ")";
    return std::nullopt;
  }
  for (Library library : kLibraries)
    torch.libraries[static_cast<int>(library)] = find_library_in(lib, library_prefix(library));
  // LibTorch archives keep the CMake package in share/cmake/Torch, Debian in
  // lib/<multiarch>/cmake/Torch, PyPI's wheels in torch/share/cmake/Torch
  // beside torch/lib.
  for (const std::string& cmake :
       {directory + "/share/cmake", lib + "/cmake", fs::path(lib).parent_path().string() + "/share/cmake"}) {
    std::string text = read_whole_file(cmake + "/Torch/TorchConfigVersion.cmake");
    std::smatch match;
    if (!std::regex_search(text, match, std::regex("PACKAGE_VERSION \"([^\"]+)\""))) continue;
    torch.version = match[1];
    torch.cmake_prefix = cmake;
    break;
  }
  return torch;
}

std::map<std::string, std::string> clean_environment() {
  std::map<std::string, std::string> set = {{"LD_PRELOAD", ""}};
  for (const Option& option : kOptions)
    if (option.role != OptionRole::kPlugin && option.role != OptionRole::kPluginCache) set[option.name] = "";
  return set;
}

ScratchDirectory::ScratchDirectory(const char* name) {
  std::string pattern = (fs::temp_directory_path() / (std::string(name) + ".XXXXXX")).string();
  path_ = mkdtemp(pattern.data()) ? pattern : "";
}

ScratchDirectory::~ScratchDirectory() {
  std::error_code ignored;
  if (!path_.empty()) fs::remove_all(path_, ignored);
}

}  // namespace fsdpskip::cli
