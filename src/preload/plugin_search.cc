#include "plugin_search.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/elf_file.h"
#include "../common/install_layout.h"
#include "../common/options_table.h"
#include "../common/plugin_abi.h"
#include "../common/torch_identity.h"

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

// A user's private group (USERGROUPS_ENAB: group id = user id, the process's
// own group): its write permission lets no one else in.
bool private_group(const struct stat& status) {
  return status.st_uid == geteuid() && status.st_gid == getegid() && status.st_gid == status.st_uid;
}

// Why `status` lets another user change what it holds; nullptr when it does not.
const char* foreign_write(const struct stat& status, uid_t install_owner) {
  if (!trusted_owner(status.st_uid, install_owner)) return "is owned by another user";
  if ((status.st_mode & S_IWOTH) && !(S_ISDIR(status.st_mode) && (status.st_mode & S_ISVTX)))
    return "is writable by others";
  if ((status.st_mode & S_IWGRP) && !private_group(status) && !(S_ISDIR(status.st_mode) && (status.st_mode & S_ISVTX)))
    return "is writable by its group";
  return nullptr;
}

__attribute__((format(printf, 3, 0))) void set_detail(PluginExamination* result, PluginVerdict verdict,
                                                       const char* format, const char* a, const char* b = "",
                                                       const char* c = "") {
  result->verdict = verdict;
  print_to(result->detail, sizeof result->detail, format, a, b, c);
}

// The directory `fd` (shown as `shown`) is safe; else says why in `result`.
bool directory_safe(int fd, const char* shown, uid_t install_owner, PluginExamination* result) {
  struct stat status;
  const char* why = fstat(fd, &status) != 0 ? "cannot be examined" : foreign_write(status, install_owner);
  if (why == nullptr) return true;
  set_detail(result, PluginVerdict::kUnsafe, "directory %s %s (chmod go-w, or a directory of your own)",
             shown[0] ? shown : "/", why);
  return false;
}

// Opens `path` (absolute) the way the kernel resolves it, one component at a
// time, following symbolic links by hand: every directory passed through
// must be safe, so no one but a trusted user can change what the path names
// between this check and dlopen. The file itself is opened only once known
// to be a regular file (a FIFO or a device is never opened). Returns the open
// file, or -1 with the reason in `result`. Not reentrant (its buffers are
// static: a plugin is looked for once per process, under pthread_once).
int open_safely(const char* path, uid_t install_owner, PluginExamination* result) {
  static char rest[2 * PATH_MAX], joined[2 * PATH_MAX], link[PATH_MAX], shown[PATH_MAX];
  if (!print_to(rest, sizeof rest, "%s", path)) return set_detail(result, PluginVerdict::kMissing, "%s is too long", path), -1;
  shown[0] = '\0';
  int dir = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC), links = 0;
  if (dir < 0 || !directory_safe(dir, shown, install_owner, result)) return dir >= 0 ? close(dir), -1 : -1;
  for (char* at = rest;;) {
    while (*at == '/') ++at;
    char* end = strchrnul(at, '/');
    bool last = *end == '\0' || end[strspn(end, "/")] == '\0';
    char name[NAME_MAX + 1];
    if (end == at || end - at > NAME_MAX) {
      close(dir);
      return set_detail(result, end == at ? PluginVerdict::kUnsafe : PluginVerdict::kMissing,
                        end == at ? "%s is not a regular file" : "%s does not exist", path), -1;
    }
    snprintf(name, sizeof name, "%.*s", static_cast<int>(end - at), at);
    at = end;
    struct stat status;
    if (strcmp(name, ".") == 0 && !last) continue;
    if (fstatat(dir, name, &status, AT_SYMLINK_NOFOLLOW) != 0) {
      close(dir);
      return set_detail(result, PluginVerdict::kMissing, "%s does not exist", path), -1;
    }
    if (S_ISLNK(status.st_mode)) {  // it lives in `dir`, which only trusted users can change
      ssize_t length = ++links > 40 ? -1 : readlinkat(dir, name, link, sizeof link - 1);
      if (length < 0) {
        close(dir);
        return set_detail(result, PluginVerdict::kUnsafe, "%s cannot be resolved (a link loop?)", path), -1;
      }
      link[length] = '\0';
      if (!print_to(joined, sizeof joined, "%s%s", link, at)) {
        close(dir);
        return set_detail(result, PluginVerdict::kMissing, "%s is too long", path), -1;
      }
      memcpy(rest, joined, strlen(joined) + 1);
      at = rest;
      if (link[0] == '/') {  // from the root again
        close(dir);
        shown[0] = '\0';
        dir = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (dir < 0) return set_detail(result, PluginVerdict::kMissing, "%s cannot be resolved", path), -1;
      }
      continue;
    }
    if (!last) {
      int next = S_ISDIR(status.st_mode) ? openat(dir, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
      close(dir);
      if (next < 0) return set_detail(result, PluginVerdict::kMissing, "%s does not exist", path), -1;
      dir = next;
      if (strcmp(name, "..") == 0) {
        if (char* slash = strrchr(shown, '/')) *slash = '\0';
      }
      else if (strcmp(name, ".") != 0) print_to(shown + strlen(shown), sizeof shown - strlen(shown), "/%s", name);
      if (!directory_safe(dir, shown, install_owner, result)) return close(dir), -1;
      continue;
    }
    if (!S_ISREG(status.st_mode)) {
      close(dir);
      return set_detail(result, PluginVerdict::kUnsafe, "%s is not a regular file", path), -1;
    }
    int fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    close(dir);
    const char* why = nullptr;
    if (fd < 0 || fstat(fd, &status) != 0 || !S_ISREG(status.st_mode)) {
      set_detail(result, PluginVerdict::kNotPlugin, "%s cannot be read", path);
    } else if ((why = foreign_write(status, install_owner)) != nullptr) {
      set_detail(result, PluginVerdict::kUnsafe, "%s %s (chmod go-w, or a plugin of your own)", path, why);
    } else {
      return fd;
    }
    if (fd >= 0) close(fd);
    return -1;
  }
}

}  // namespace

const char* plugin_place_name(PluginPlace place) {
  switch (place) {
    case PluginPlace::kVariable: return option_of(OptionRole::kPlugin).name;
    case PluginPlace::kBeside: return "beside the preload";
    case PluginPlace::kInstall: return "the install's plugins";
    case PluginPlace::kCache: return "the user's cache";
  }
  return "?";
}

void install_plugin_directory(const char* preload_path, char* out, size_t out_size) {
  if (!install_path_of_preload(preload_path, InstallPart::kPlugins, out, out_size) && out_size) out[0] = '\0';
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
  out[count].place = PluginPlace::kBeside;
  count += install_path_of_preload(preload_path, InstallPart::kPlugin, out[count].path, PATH_MAX);
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
  // Relative to the current directory now, as dlopen would see it now (and
  // never searched along LD_LIBRARY_PATH, as dlopen does a name without '/').
  char directory[PATH_MAX];
  bool fits = path[0] == '/' ? print_to(result.path, sizeof result.path, "%s", path)
                             : getcwd(directory, sizeof directory) != nullptr &&
                                   print_to(result.path, sizeof result.path, "%s/%s", directory, path);
  if (!fits) {
    set_detail(&result, PluginVerdict::kMissing, "%s cannot be resolved", path);
    return result;
  }
  int fd = open_safely(result.path, install_owner, &result);
  if (fd < 0) return result;
  static char identity[1024];  // see open_safely: not reentrant
  ElfFile elf(fd);
  if (elf.problem() != nullptr) {
    set_detail(&result, PluginVerdict::kNotPlugin, "%s is not a fsdpskip torch plugin (it %s)", path, elf.problem());
  } else if (elf.problem_here() != nullptr) {
    set_detail(&result, PluginVerdict::kOtherArchitecture, "%s %s", path, elf.problem());
  } else if (!elf.section_text(FSDPSKIP_TORCH_ID_SECTION, identity, sizeof identity)) {
    set_detail(&result, PluginVerdict::kNotPlugin, "%s is not a fsdpskip torch plugin (no %s section)", path,
               FSDPSKIP_TORCH_ID_SECTION);
  } else {
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
