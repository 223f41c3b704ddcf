#include "plugin.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "../common/options_table.h"
#include "../common/plugin_abi.h"
#include "../common/torch_identity.h"
#include "../common/install_layout.h"
#include "elf_facts.h"
#include "json_fields.h"
#include "plugin_search.h"
#include "subprocess.h"
#include "text_table.h"

namespace fsdpskip::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;


std::string cache_directory() {
  char directory[PATH_MAX];
  cache_plugin_directory(getenv(option_of(OptionRole::kPluginCache).name), getenv("HOME"), directory, sizeof directory);
  return directory;
}

// The last `count` lines of a build's output, for the one error it ends in.
std::string last_lines(const std::string& text, int count) {
  size_t at = text.size();
  while (count-- > 0 && at != std::string::npos && at > 0) at = text.rfind('\n', at - 1);
  return at == std::string::npos ? text : text.substr(at + 1);
}

bool run_step(const char* what, const std::vector<std::string>& argv, const std::string& scratch) {
  Finished step = run_program(argv, clean_environment(), scratch, 3600);
  if (step.status == 0) return true;
  if (step.status == 127 && step.out.empty())
    fprintf(stderr, "fsdpskip plugin build: cannot run %s: it needs CMake (3.18 or later) and a C++ compiler on PATH\n",
            argv[0].c_str());
  else
    fprintf(stderr, "fsdpskip plugin build: %s failed (%s); its last lines:\n%s%s", what,
            step.timed_out ? "timed out" : ("exit status " + std::to_string(step.status)).c_str(),
            last_lines(step.out, 15).c_str(), last_lines(step.err, 15).c_str());
  return false;
}

// Puts `built` at `directory`/libfsdpskip_torch.so in one rename, so a
// process looking meanwhile sees the old file or the new, never half of one.
bool place_plugin(const std::string& built, const std::string& directory, std::string* error) {
  // Made 0755 whatever the umask: the preload refuses a plugin below a
  // directory its group can write.
  for (size_t slash = directory.find('/', 1);; slash = directory.find('/', slash + 1)) {
    std::string part = directory.substr(0, slash);
    if (mkdir(part.c_str(), 0755) != 0 && errno != EEXIST)
      return *error = "cannot create " + part + ": " + strerror(errno), false;
    if (slash == std::string::npos) break;
  }
  std::error_code failure;
  std::string final_path = directory + "/" + kPluginFileName;
  std::string partial = directory + "/." + kPluginFileName + ".partial." + std::to_string(getpid());
  fs::copy_file(built, partial, fs::copy_options::overwrite_existing, failure);
  if (!failure) fs::permissions(partial, fs::perms(0644), failure);
  if (!failure) fs::rename(partial, final_path, failure);
  if (failure) {
    std::error_code ignored;
    fs::remove(partial, ignored);
    return *error = "cannot write " + final_path + ": " + failure.message(), false;
  }
  return true;
}

struct Listed {
  std::string place, path, torch, build_id, status;
  bool loadable = false;
};

Listed describe(PluginPlace place, const std::string& path, const std::string& expected_build_id, uid_t owner) {
  Listed row{plugin_place_name(place), path, "?", "?", "", false};
  std::string error;
  auto identity = read_elf_section(path, FSDPSKIP_TORCH_ID_SECTION, &error);
  char value[PATH_MAX];
  std::string recorded_libtorch = identity ? identity_field(identity->c_str(), "libtorch", value, sizeof value) : "";
  // Beside the preload any torch may be the one; in a build-id directory, only that one.
  std::string expected = expected_build_id;
  if (expected.empty() && identity) expected = identity_field(identity->c_str(), "build-id", value, sizeof value);
  PluginExamination examined = examine_plugin(path.c_str(), expected.c_str(), owner);
  row.torch = examined.torch;
  row.build_id = examined.build_id;
  if (examined.verdict != PluginVerdict::kMatch) {
    row.status = examined.detail;
    return row;
  }
  // The libtorch it was built against, still there with that build-id? (A
  // stale plugin is harmless, never matching a running torch, but useless.)
  auto facts = read_elf_facts(recorded_libtorch, &error);
  if (!facts)
    row.status = "stale: the libtorch it was built against (" + recorded_libtorch + ") is gone";
  else if (facts->build_id != row.build_id)
    row.status = "stale: " + recorded_libtorch + " has changed since (now build-id " + facts->build_id + ")";
  else
    row.status = "ok (built against " + recorded_libtorch + ")";
  row.loadable = true;
  return row;
}

std::vector<Listed> every_plugin(const Layout& layout) {
  uid_t owner = install_owner(layout.preload.c_str());
  std::vector<Listed> rows;
  std::error_code failure;
  if (fs::exists(layout.plugin, failure)) rows.push_back(describe(PluginPlace::kBeside, layout.plugin, "", owner));
  for (auto [place, directory] : {std::pair{PluginPlace::kInstall, layout.plugins},
                                  std::pair{PluginPlace::kCache, cache_directory()}}) {
    if (directory.empty()) continue;
    std::vector<fs::path> entries;
    for (const auto& entry : fs::directory_iterator(directory, failure)) entries.push_back(entry.path());
    std::sort(entries.begin(), entries.end());
    for (const fs::path& entry : entries) {
      std::string file = (entry / kPluginFileName).string();
      if (fs::exists(file, failure)) rows.push_back(describe(place, file, entry.filename().string(), owner));
    }
  }
  return rows;
}

}  // namespace

PluginChoice find_plugin(const Layout& layout, const std::string& build_id) {
  PluginChoice choice;
  PluginCandidate candidates[kMaxPluginCandidates];
  int count = plugin_candidates(getenv(option_of(OptionRole::kPlugin).name), layout.preload.c_str(),
                                cache_directory().c_str(), build_id.c_str(), candidates);
  for (int i = 0; i < count; ++i) {
    PluginExamination examined = examine_plugin(candidates[i].path, build_id.c_str(), install_owner(layout.preload.c_str()));
    std::string place = plugin_place_name(candidates[i].place);
    if (examined.verdict == PluginVerdict::kMatch)
      return choice.path = candidates[i].path, choice.place = place, choice.torch = examined.torch, choice;
    choice.passed_over.push_back(place + ": " + examined.detail);
  }
  return choice;
}

std::string plugin_build_command(const Torch& torch) {
  return "fsdpskip plugin build " + (torch.origin.rfind("python ", 0) == 0 ? "--python " + torch.origin.substr(7)
                                                                            : "--libtorch " + torch.origin.substr(9));
}

int plugin_build(const PluginBuildOptions& options) {
  Layout layout = installed_layout();
  ScratchDirectory scratch("fsdpskip-plugin-build");
  if (scratch.path().empty()) {
    fprintf(stderr, "fsdpskip plugin build: cannot create a directory in %s\n", fs::temp_directory_path().c_str());
    return 1;
  }
  std::string error;
  std::optional<Torch> torch = torch_of(options.python, options.libtorch, scratch.path(), &error);
  if (!torch) return fprintf(stderr, "fsdpskip plugin build: %s\n", error.c_str()), 1;
  const std::string& libtorch = library_path(*torch, Library::kTorchCpu);
  if (torch->cmake_prefix.empty())
    return fprintf(stderr, "fsdpskip plugin build: torch %s (%s) has no CMake package (Torch/TorchConfig.cmake): "
                           "the plugin is built with torch's headers and CMake files\n",
                   torch->version.c_str(), libtorch.c_str()), 1;
  auto facts = read_elf_facts(libtorch, &error);
  if (!facts || facts->build_id.empty())
    return fprintf(stderr, "fsdpskip plugin build: cannot read the GNU build-id of %s%s%s\n", libtorch.c_str(),
                   facts ? "" : ": ", facts ? "" : error.c_str()), 1;
  if (access((layout.sources + "/CMakeLists.txt").c_str(), R_OK) != 0)
    return fprintf(stderr, "fsdpskip plugin build: this install carries no sources (%s): reinstall fsdpskip\n",
                   layout.sources.c_str()), 1;
  std::string directory = options.system ? layout.plugins : cache_directory();
  if (directory.empty())
    return fprintf(stderr, "fsdpskip plugin build: neither XDG_CACHE_HOME nor HOME is an absolute path: set one, or "
                           "use --system\n"), 1;
  directory += "/" + facts->build_id;

  printf("fsdpskip plugin build: torch %s (%s), libtorch_cpu build-id %s\n", torch->version.c_str(),
         libtorch.c_str(), facts->build_id.c_str());
  fflush(stdout);
  std::string build = scratch.path() + "/build";
  int jobs = options.jobs > 0 ? options.jobs : static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  if (!run_step("configuring", {"cmake", "-S", layout.sources, "-B", build, "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
                                "-DTorch_DIR=" + torch->cmake_prefix + "/Torch", "-DFSDPSKIP_BUILD_COMMAND=OFF",
                                "-DFSDPSKIP_BUILD_TESTS=OFF", "-DFSDPSKIP_BUILD_BENCHMARKS=OFF"},
                scratch.path()) ||
      !run_step("compiling", {"cmake", "--build", build, "--target", "fsdpskip_torch", "-j", std::to_string(jobs)},
                scratch.path()))
    return 1;
  if (!place_plugin(build + "/lib/" + kPluginFileName, directory, &error))
    return fprintf(stderr, "fsdpskip plugin build: %s\n", error.c_str()), 1;
  std::string placed = directory + "/" + kPluginFileName;
  PluginExamination examined = examine_plugin(placed.c_str(), facts->build_id.c_str(), install_owner(layout.preload.c_str()));
  if (examined.verdict != PluginVerdict::kMatch)
    return fprintf(stderr, "fsdpskip plugin build: built, but the preload would not load it: %s\n",
                   examined.detail), 1;
  printf("fsdpskip plugin build: %s\n", placed.c_str());
  return 0;
}

int plugin_list(const PluginListOptions& options) {
  Layout layout = installed_layout();
  std::vector<Listed> rows = every_plugin(layout);
  if (options.json) {
    json out = {{"places", {{plugin_place_name(PluginPlace::kBeside), layout.plugin},
                            {plugin_place_name(PluginPlace::kInstall), layout.plugins},
                            {plugin_place_name(PluginPlace::kCache), cache_directory()}}},
                {"plugins", json::array()}};
    for (const Listed& row : rows)
      out["plugins"].push_back({{"place", row.place}, {"path", row.path}, {"torch", row.torch},
                                {"build_id", row.build_id}, {"loadable", row.loadable}, {"status", row.status}});
    printf("%s\n", json_text(out, 2).c_str());
    return 0;
  }
  printf("searched in this order (the first plugin built for the running libtorch is loaded):\n"
         "  %s, when set (then nothing else)\n  %s\n  %s/<build-id>/\n  %s/<build-id>/\n",
         plugin_place_name(PluginPlace::kVariable), layout.plugin.c_str(), layout.plugins.c_str(),
         cache_directory().empty() ? "(no user cache: HOME is not absolute)" : cache_directory().c_str());
  if (rows.empty()) {
    printf("no plugins: build one with fsdpskip plugin build --python PY (or --libtorch DIR)\n");
    return 0;
  }
  TextTable table({"place", "torch", "libtorch_cpu build-id", "status", "path"});
  for (const Listed& row : rows) table.add({row.place, row.torch, row.build_id, row.status, row.path});
  printf("%s", table.render().c_str());
  return 0;
}

}  // namespace fsdpskip::cli
