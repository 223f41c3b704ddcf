// Where libfsdpskip_torch.so for the running libtorch is found, and whether a
// file found there may be loaded: the one home of that order and of those
// rules, read by the preload (before it dlopens anything) and by the command
// (`fsdpskip doctor`, `fsdpskip plugin list`). Freestanding: no C++ runtime,
// no allocation.
//
// The places, searched in this order for the running libtorch_cpu's GNU
// build-id:
//   1. FSDPSKIP_PLUGIN, when set: the only place looked at.
//   2. <lib>/libfsdpskip_torch.so beside libfsdpskip.so: the plugin built
//      with the install (or the build tree) for the torch it was built against.
//   3. <lib>/fsdpskip/plugins/<build-id>/libfsdpskip_torch.so: the install's
//      plugins (`fsdpskip plugin build --system`).
// (<lib>: the installation's lib/, ../common/install_layout.h.)
//   4. $XDG_CACHE_HOME/fsdpskip/plugins/<build-id>/libfsdpskip_torch.so, else
//      $HOME/.cache/…: the user's (`fsdpskip plugin build`).
// The first file that passes examine_plugin is loaded; the others are passed
// over.
#pragma once

#include <limits.h>
#include <stddef.h>
#include <sys/types.h>

namespace fsdpskip {

inline constexpr char kPluginFileName[] = "libfsdpskip_torch.so";

enum class PluginPlace { kVariable, kBeside, kInstall, kCache };

// "FSDPSKIP_PLUGIN", "beside the preload", "the install's plugins", "the user's cache".
const char* plugin_place_name(PluginPlace place);

struct PluginCandidate {
  PluginPlace place;
  char path[PATH_MAX];
};
inline constexpr int kMaxPluginCandidates = 3;

// <directory of preload_path>/fsdpskip/plugins.
void install_plugin_directory(const char* preload_path, char* out, size_t out_size);

// $XDG_CACHE_HOME/fsdpskip/plugins, else $HOME/.cache/fsdpskip/plugins, each
// only when absolute (the XDG rule); "" when neither is.
void cache_plugin_directory(const char* xdg_cache_home, const char* home, char* out, size_t out_size);

// The files to try for libtorch_cpu build-id `build_id`, in search order.
// `variable`: FSDPSKIP_PLUGIN (nullptr or "" when unset); `cache_directory`
// from cache_plugin_directory ("" skips the cache). Returns how many.
int plugin_candidates(const char* variable, const char* preload_path, const char* cache_directory,
                      const char* build_id, PluginCandidate out[kMaxPluginCandidates]);

enum class PluginVerdict {
  kMatch,       // may be loaded: built for this libtorch and this plugin ABI, safe
  kMissing,     // no such file
  kUnsafe,      // not a regular file, or another user can write it or a directory above it
  kNotPlugin,   // unreadable, or no identity section
  kOtherArchitecture,  // an ELF file for another machine (an aarch64 plugin on x86-64)
  kOtherTorch,  // built for another libtorch_cpu
  kOtherAbi,    // built by a fsdpskip whose plugin ABI differs
};

struct PluginExamination {
  PluginVerdict verdict = PluginVerdict::kMissing;
  char path[PATH_MAX] = {0};  // the absolute path examined: what to dlopen on kMatch
  char torch[64] = "?";       // the torch version it was built for
  char build_id[128] = "?";   // the libtorch_cpu build-id it was built for
  char detail[1024] = {0};    // why it is not kMatch, one clause
};

// Reads the file at `path` (relative: to the current directory) without
// loading it. Safe: a regular file (a FIFO or a device is refused, never
// opened) that only root, this user or `install_owner` (the owner of
// libfsdpskip.so, who controls the code running anyway) can write, reached
// through directories and links likewise, component by component as the
// kernel resolves it; a sticky directory's entries are safe from other users,
// and a user's private group (group id = user id = the process's) counts as
// the user. Not reentrant: the preload calls it under pthread_once.
PluginExamination examine_plugin(const char* path, const char* build_id, uid_t install_owner);

}  // namespace fsdpskip
