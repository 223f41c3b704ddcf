#include "plugin_search.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/plugin_abi.h"
#include "../common/torch_identity.h"
#include "elf_identity.h"

namespace fsdpskip {
namespace {

// snprintf that says whether everything fitted (a cut path names another file).
__attribute__((format(printf, 3, 4))) bool print_to(char* out, size_t size, const char* format, ...) {
  va_list arguments;
  va_start(arguments, format);
  int length = vsnprintf(out, size, format, arguments);
  va_end(arguments);
  return length >= 0 && static_cast<size_t>(length) < size;
}

bool absolute(const char* path) { return path != nullptr && path[0] == '/'; }

bool trusted_owner(uid_t owner, uid_t install_owner) {
  return owner == 0 || owner == geteuid() || owner == install_owner;
}

// Why `path` (with `status`) lets another user change what it holds; nullptr
// when it does not.
const char* foreign_write(const struct stat& status, uid_t install_owner) {
  if (!trusted_owner(status.st_uid, install_owner)) return "is owned by another user";
  bool shared = (status.st_mode & (S_IWGRP | S_IWOTH)) != 0;
  if (shared && !(S_ISDIR(status.st_mode) && (status.st_mode & S_ISVTX))) return "is writable by group or others";
  return nullptr;
}

__attribute__((format(printf, 3, 0))) void set_detail(PluginExamination* result, PluginVerdict verdict, const char* format, const char* a,
                const char* b = "", const char* c = "") {
  result->verdict = verdict;
  print_to(result->detail, sizeof result->detail, format, a, b, c);
}

// Every directory above the canonical `path`, up to /, is safe.
bool directories_safe(const char* path, uid_t install_owner, PluginExamination* result) {
  char directory[PATH_MAX];
  if (realpath(path, directory) == nullptr) {
    set_detail(result, PluginVerdict::kMissing, "%s cannot be resolved", path);
    return false;
  }
  for (char* slash = strrchr(directory, '/'); slash != nullptr; slash = strrchr(directory, '/')) {
    if (slash == directory) slash[1] = '\0';  // "/" itself, last
    else *slash = '\0';
    struct stat status;
    if (stat(directory, &status) != 0) {
      set_detail(result, PluginVerdict::kUnsafe, "%s cannot be examined", directory);
      return false;
    }
    if (const char* why = foreign_write(status, install_owner)) {
      set_detail(result, PluginVerdict::kUnsafe, "directory %s %s (chmod go-w, or a directory of your own)",
                 directory, why);
      return false;
    }
    if (slash == directory) break;
  }
  return true;
}

}  // namespace

const char* plugin_place_name(PluginPlace place) {
  switch (place) {
    case PluginPlace::kVariable: return "FSDPSKIP_PLUGIN";
    case PluginPlace::kBeside: return "beside the preload";
    case PluginPlace::kInstall: return "the install's plugins";
    case PluginPlace::kCache: return "the user's cache";
  }
  return "?";
}

void install_plugin_directory(const char* preload_path, char* out, size_t out_size) {
  const char* slash = strrchr(preload_path, '/');
  int directory = slash ? static_cast<int>(slash - preload_path) : 1;
  if (!print_to(out, out_size, "%.*s/fsdpskip/plugins", directory, slash ? preload_path : ".") && out_size) out[0] = '\0';
}

void cache_plugin_directory(const char* xdg_cache_home, const char* home, char* out, size_t out_size) {
  bool fits = false;
  if (absolute(xdg_cache_home)) fits = print_to(out, out_size, "%s/fsdpskip/plugins", xdg_cache_home);
  else if (absolute(home)) fits = print_to(out, out_size, "%s/.cache/fsdpskip/plugins", home);
  if (!fits && out_size) out[0] = '\0';
}

int plugin_candidates(const char* variable, const char* preload_path, const char* cache_directory,
                      const char* build_id, PluginCandidate out[kMaxPluginCandidates]) {
  if (variable != nullptr && variable[0] != '\0') {
    out[0].place = PluginPlace::kVariable;
    return print_to(out[0].path, sizeof out[0].path, "%s", variable) ? 1 : 0;
  }
  int count = 0;  // a place whose path does not fit is left out
  const char* slash = strrchr(preload_path, '/');
  int directory = slash ? static_cast<int>(slash - preload_path) : 1;
  out[count].place = PluginPlace::kBeside;
  count += print_to(out[count].path, PATH_MAX, "%.*s/%s", directory, slash ? preload_path : ".", kPluginFileName);
  char plugins[PATH_MAX];
  install_plugin_directory(preload_path, plugins, sizeof plugins);
  out[count].place = PluginPlace::kInstall;
  if (plugins[0] != '\0') count += print_to(out[count].path, PATH_MAX, "%s/%s/%s", plugins, build_id, kPluginFileName);
  if (cache_directory != nullptr && cache_directory[0] != '\0') {
    out[count].place = PluginPlace::kCache;
    count += print_to(out[count].path, PATH_MAX, "%s/%s/%s", cache_directory, build_id, kPluginFileName);
  }
  return count;
}

PluginExamination examine_plugin(const char* path, const char* build_id, uid_t install_owner) {
  PluginExamination result;
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    set_detail(&result, access(path, F_OK) == 0 ? PluginVerdict::kNotPlugin : PluginVerdict::kMissing,
               access(path, F_OK) == 0 ? "%s cannot be read" : "%s does not exist", path);
    return result;
  }
  struct stat status;
  char identity[1024];
  const char* why = nullptr;
  if (fstat(fd, &status) != 0 || !S_ISREG(status.st_mode)) {
    set_detail(&result, PluginVerdict::kUnsafe, "%s is not a regular file", path);
  } else if ((why = foreign_write(status, install_owner)) != nullptr) {
    set_detail(&result, PluginVerdict::kUnsafe, "%s %s (chmod go-w, or a plugin of your own)", path, why);
  } else if (!read_fd_section(fd, FSDPSKIP_TORCH_ID_SECTION, identity, sizeof identity)) {
    set_detail(&result, PluginVerdict::kNotPlugin, "%s is not a fsdpskip torch plugin (no %s section)", path,
               FSDPSKIP_TORCH_ID_SECTION);
  } else if (directories_safe(path, install_owner, &result)) {
    char abi[16];
    identity_field(identity, "torch", result.torch, sizeof result.torch);
    identity_field(identity, "build-id", result.build_id, sizeof result.build_id);
    identity_field(identity, "abi", abi, sizeof abi);
    if (strcmp(abi, FSDPSKIP_PLUGIN_ABI_TEXT) != 0)
      set_detail(&result, PluginVerdict::kOtherAbi,
                 "%s was built by another fsdpskip (plugin ABI %s, this preload's is " FSDPSKIP_PLUGIN_ABI_TEXT ")",
                 path, abi);
    else if (strcmp(result.build_id, build_id) != 0)
      set_detail(&result, PluginVerdict::kOtherTorch, "%s was built for torch %s (libtorch_cpu build-id %s)", path,
                 result.torch, result.build_id);
    else
      result.verdict = PluginVerdict::kMatch;
  }
  close(fd);
  return result;
}

}  // namespace fsdpskip
