// The shape of an installation (and of a build tree, which has the same),
// the one home of it for the preload, which finds the plugin and names the
// command from its own path, and for the command, which finds everything
// from its own. Header-only and freestanding (no allocation).
//   <root>/lib/libfsdpskip.so                 the preload
//   <root>/lib/libfsdpskip_torch.so           the plugin built with it
//   <root>/lib/fsdpskip/plugins/<build-id>/   the install's plugins
//   <root>/bin/fsdpskip                       the command
//   <root>/libexec/fsdpskip/fsdpskip-probe    the doctor's C++ probe
//   <root>/share/fsdpskip/probe.py            its Python probe
//   <root>/share/fsdpskip/src                 the sources `plugin build` builds
#pragma once

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

namespace fsdpskip {

enum class InstallPart { kPreload, kPlugin, kPlugins, kCommand, kCppProbe, kPythonProbe, kSources };

inline const char* install_part_path(InstallPart part) {
  switch (part) {
    case InstallPart::kPreload: return "lib/libfsdpskip.so";
    case InstallPart::kPlugin: return "lib/libfsdpskip_torch.so";
    case InstallPart::kPlugins: return "lib/fsdpskip/plugins";
    case InstallPart::kCommand: return "bin/fsdpskip";
    case InstallPart::kCppProbe: return "libexec/fsdpskip/fsdpskip-probe";
    case InstallPart::kPythonProbe: return "share/fsdpskip/probe.py";
    case InstallPart::kSources: return "share/fsdpskip/src";
  }
  return "";
}

// The root of the installation whose part `part` is at `path` (two levels
// up for every part but the three-level ones); false when it does not fit.
inline bool install_root(const char* path, InstallPart part, char* out, size_t out_size) {
  int length = snprintf(out, out_size, "%s", path);
  if (length < 0 || static_cast<size_t>(length) >= out_size) return false;
  for (const char* c = install_part_path(part); *c; ++c) {
    if (*c != '/' && c[1] != '\0') continue;
    char* slash = strrchr(out, '/');
    if (slash == nullptr) return false;
    *slash = '\0';
  }
  if (out[0] == '\0') snprintf(out, out_size, "/");
  return true;
}

// <root>/<part>; false when it does not fit.
inline bool install_path(const char* root, InstallPart part, char* out, size_t out_size) {
  bool slash = root[0] != '\0' && root[strlen(root) - 1] == '/';
  int length = snprintf(out, out_size, "%s%s%s", root, slash ? "" : "/", install_part_path(part));
  return length >= 0 && static_cast<size_t>(length) < out_size;
}

// A part of the installation whose preload is at `preload_path`: the parts
// under lib/ beside the preload, in whatever directory it is (a preload and
// its plugin copied into one directory still find each other), the others
// from the root above it. False when it does not fit.
inline bool install_path_of_preload(const char* preload_path, InstallPart part, char* out, size_t out_size) {
  const char* path = install_part_path(part);
  const char* slash = strrchr(preload_path, '/');
  int length;
  if (strncmp(path, "lib/", 4) == 0) {
    length = slash ? snprintf(out, out_size, "%.*s/%s", static_cast<int>(slash - preload_path), preload_path, path + 4)
                   : snprintf(out, out_size, "./%s", path + 4);
  } else {
    char root[4096];
    if (!install_root(preload_path, InstallPart::kPreload, root, sizeof root)) return false;
    return install_path(root, part, out, out_size);
  }
  return length >= 0 && static_cast<size_t>(length) < out_size;
}

// The owner of the installation (of its preload), trusted like root by the
// plugin search: whoever controls the code running anyway.
inline uid_t install_owner(const char* preload_path) {
  struct stat status;
  return stat(preload_path, &status) == 0 ? status.st_uid : 0;
}

}  // namespace fsdpskip
