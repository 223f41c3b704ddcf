// Opening the plugin (plugin_loading.h): which file, then dlopen and the
// handshake, each refusal one line.
#include "plugin_loading.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../common/install_layout.h"
#include "../common/libraries.h"
#include "loaded_objects.h"
#include "log.h"
#include "plugin_search.h"

namespace fsdpskip {
namespace {

// The line for a process whose torch has no plugin anywhere: where fsdpskip
// looked, what it passed over and why, and the command that builds one.
void say_no_plugin(const char* preload, const char* torch_path, const char* build_id, const PluginCandidate* candidates,
                   const PluginExamination* examined, int count) {
  static char looked[2048];  // under pthread_once: no other thread is here
  looked[0] = '\0';
  int used = 0;
  for (int i = 0; i < count && used < static_cast<int>(sizeof looked); ++i)
    used += snprintf(looked + used, sizeof looked - used, "%s%s: %s", i ? "; " : "", plugin_place_name(candidates[i].place),
                     examined[i].verdict == PluginVerdict::kMissing ? candidates[i].path : examined[i].detail);
  static char command[PATH_MAX];  // <root>/bin/fsdpskip for <root>/lib/libfsdpskip.so
  if (!install_path_of_preload(preload, InstallPart::kCommand, command, sizeof command)) command[0] = '\0';
  static char torch_directory[PATH_MAX];
  snprintf(torch_directory, sizeof torch_directory, "%.*s",
           static_cast<int>(strrchr(torch_path, '/') ? strrchr(torch_path, '/') - torch_path : 1), torch_path);
  say(FSDPSKIP_MESSAGE_WARNING,
      "no plugin for this process's torch (%s, build-id %s) [%s]; build one with: %s plugin build --libtorch %s; "
      "inactive in this process",
      torch_path, build_id[0] ? build_id : "none", looked, access(command, X_OK) == 0 ? command : "fsdpskip",
      torch_directory);
}

}  // namespace

const fsdpskip_plugin* open_plugin(const char* preload, const char* plugin_override, const char* plugin_cache,
                                   fsdpskip_host* host) {
  static char torch_path[PATH_MAX], loaded_id[128];
  static PluginCandidate candidates[kMaxPluginCandidates];
  static PluginExamination examined[kMaxPluginCandidates];
  if (!loaded_library_identity(library_prefix(Library::kTorchCpu), torch_path, sizeof torch_path, loaded_id, sizeof loaded_id)) {
    say(FSDPSKIP_MESSAGE_WARNING, "no %s is loaded in this process; inactive", library_prefix(Library::kTorchCpu));
    return nullptr;
  }
  uid_t owner = install_owner(preload);
  int count = plugin_candidates(plugin_override, preload, plugin_cache, loaded_id, candidates);
  const char* path = nullptr;
  for (int i = 0; i < count && path == nullptr; ++i) {
    examined[i] = examine_plugin(candidates[i].path, loaded_id, owner);
    // The path examined, made absolute: dlopen re-resolves that very string
    // through directories only trusted users can change.
    if (examined[i].verdict == PluginVerdict::kMatch) path = examined[i].path;
    else say(FSDPSKIP_MESSAGE_DEBUG, "passed over %s: %s", plugin_place_name(candidates[i].place), examined[i].detail);
  }
  if (path == nullptr) {
    if (count == 0)
      say(FSDPSKIP_MESSAGE_WARNING, "no place to look for a plugin (paths too long); inactive in this process");
    else if (candidates[0].place != PluginPlace::kVariable)
      say_no_plugin(preload, torch_path, loaded_id, candidates, examined, count);
    else if (examined[0].verdict == PluginVerdict::kOtherTorch)
      say(FSDPSKIP_MESSAGE_WARNING, "%s, but this process runs %s (build-id %s); inactive in this process. Rebuild it "
          "against this torch (fsdpskip plugin build)", examined[0].detail, torch_path, loaded_id[0] ? loaded_id : "none");
    else
      say(FSDPSKIP_MESSAGE_WARNING, "%s: %s; inactive in this process", plugin_place_name(PluginPlace::kVariable),
          examined[0].detail);
    return nullptr;
  }
  say(FSDPSKIP_MESSAGE_DEBUG, "loading the plugin %s", path);
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    say(FSDPSKIP_MESSAGE_WARNING, "cannot load %s: %s; inactive in this process", path, dlerror());
    return nullptr;
  }
  auto load = reinterpret_cast<fsdpskip_plugin_load_fn>(dlsym(handle, FSDPSKIP_PLUGIN_ENTRY));
  if (load == nullptr) {
    say(FSDPSKIP_MESSAGE_WARNING, "%s has no %s; inactive in this process", path, FSDPSKIP_PLUGIN_ENTRY);
    return nullptr;
  }
  const fsdpskip_plugin* plugin = load(host);  // prints its own reason on NULL
  if (plugin != nullptr && plugin->abi != FSDPSKIP_PLUGIN_ABI) {
    say(FSDPSKIP_MESSAGE_WARNING, "%s speaks plugin ABI %u, this preload %d; inactive in this process", path, plugin->abi,
                FSDPSKIP_PLUGIN_ABI);
    return nullptr;
  }
  return plugin;
}


}  // namespace fsdpskip
