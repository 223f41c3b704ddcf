// Resolving the original definitions behind the interposers.
//
// dlsym(RTLD_NEXT) finds nothing when Python loaded libtorch with
// RTLD_LOCAL, so each original is looked up in the loaded object that defines
// it: first the objects whose soname matches the row's library, then every
// other loaded object. dlsym on a NOLOAD handle searches that object and its
// dependencies only, never the preload, but a result is still checked against
// our own definitions.
//
// Looking up takes the dynamic linker's dl_load_write_lock (dl_iterate_phdr,
// dladdr), which fork does not reset: a child forked while another thread
// is inside a lookup waits forever in its own. So once one original is found
// (torch is loaded), every row is looked up at once: a child then looks up
// only a row its parent had not found, and the window is that one pass
// instead of each row's first call across the run. (A fork handler cannot
// close the pass's window: it runs under glibc's fork lock, which a dlopen
// constructor registering its own handler takes after the linker's lock.)
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>

#include "hooks.h"
#include "log.h"

namespace fsdpskip {

Hook g_hooks[] = {
#define HOOK(id, library, shape, kernel, mangled) {#id, Library::library, mangled, nullptr},
#include "hooks.def"
#undef HOOK
};

namespace {

struct Candidates {
  const char* prefix;  // nullptr: every object
  const void* self_base;
  int count;
  char paths[8][PATH_MAX];
};

const char* base_name(const char* path) {
  const char* slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

int collect(struct dl_phdr_info* info, size_t, void* data) {
  auto* candidates = static_cast<Candidates*>(data);
  const char* name = info->dlpi_name;
  if (name == nullptr || *name == '\0') return 0;  // the executable: see below
  if (reinterpret_cast<const void*>(info->dlpi_addr) == candidates->self_base) return 0;
  if (candidates->prefix && strncmp(base_name(name), candidates->prefix, strlen(candidates->prefix)) != 0)
    return 0;
  if (strlen(name) >= PATH_MAX) return 0;
  strcpy(candidates->paths[candidates->count++], name);
  return candidates->count == 8;  // stop when full
}

bool defined_by_us(void* address, const void* self_base) {
  Dl_info info;
  return dladdr(address, &info) && info.dli_fbase == self_base;
}

void* look_up(const char* symbol, const char* prefix, const void* self_base) {
  Candidates candidates{prefix, self_base, 0, {}};
  dl_iterate_phdr(collect, &candidates);  // dlopen only after it returns
  for (int i = 0; i < candidates.count; ++i) {
    void* handle = dlopen(candidates.paths[i], RTLD_LAZY | RTLD_NOLOAD);
    if (handle == nullptr) continue;
    void* address = dlsym(handle, symbol);
    dlclose(handle);  // still loaded: NOLOAD only added a reference
    if (address && !defined_by_us(address, self_base)) return address;
  }
  return nullptr;
}

const void* self_base() {
  Dl_info info;
  dladdr(reinterpret_cast<void*>(&look_up), &info);
  return info.dli_fbase;
}

void* look_up_original(HookId id) {
  Hook& hook = g_hooks[static_cast<int>(id)];
  void* address = __atomic_load_n(&hook.original, __ATOMIC_ACQUIRE);
  if (address != nullptr) return address;

  const void* self = self_base();
  address = look_up(hook.mangled, library_prefix(hook.library), self);
  if (address == nullptr) address = look_up(hook.mangled, nullptr, self);
  if (address == nullptr) {
    // A statically linked torch lives in the executable itself.
    void* handle = dlopen(nullptr, RTLD_LAZY);
    void* candidate = handle ? dlsym(handle, hook.mangled) : nullptr;
    if (candidate && !defined_by_us(candidate, self)) address = candidate;
  }
  if (address != nullptr) __atomic_store_n(&hook.original, address, __ATOMIC_RELEASE);
  return address;
}

}  // namespace

void* find_original(HookId id) {
  void* address = look_up_original(id);
  // Only processes that call into torch pay for the pass. The first thread
  // here runs it and nobody waits for it (a thread inside dlopen may be
  // calling into torch: waiting could close a cycle with the linker's lock).
  static bool every_row_started = false;
  if (address != nullptr && !__atomic_load_n(&every_row_started, __ATOMIC_ACQUIRE) &&
      !__atomic_exchange_n(&every_row_started, true, __ATOMIC_ACQ_REL))
    for (int i = 0; i < kHookCount; ++i) look_up_original(static_cast<HookId>(i));
  return address;
}

void* resolve_original(HookId id) {
  void* address = find_original(id);
  if (address == nullptr) {
    const Hook& hook = g_hooks[static_cast<int>(id)];
    say(FSDPSKIP_MESSAGE_ERROR, "cannot find the original of %s (%s) in any loaded object; aborting", hook.id, hook.mangled);
    abort();
  }
  return address;
}

}  // namespace fsdpskip
