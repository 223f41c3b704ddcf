// Resolving the original definitions behind the interposers.
//
// dlsym(RTLD_NEXT) finds nothing when Python loaded libtorch with
// RTLD_LOCAL, so each original is looked up in the loaded objects whose file
// name matches the row's library, read without the dynamic linker
// (loaded_objects.h: its locks, which fork does not reset, are never taken
// here, so a child forked at any moment can look up what it needs). When no
// object of that name is loaded, every loaded object is searched (a torch
// laid out otherwise, or linked into the program). Once one original is
// found (torch is loaded), every row whose library is loaded is looked up
// at once, so that an interposer's later first calls find theirs resolved.
#include "hooks.h"

#include "draw_slots.h"
#include "loaded_objects.h"
#include "log.h"

#include <stdlib.h>

namespace fsdpskip {

namespace {

constexpr int kLibraryCount = sizeof kLibraries / sizeof kLibraries[0];
// Objects a pass looks into: each library's, and room for a second copy.
constexpr int kMaxObjects = 2 * kLibraryCount;

void* look_up_in(const LoadedLibrary* objects, int count, const HookRow& row) {
  for (int i = 0; i < count; ++i)
    if (objects[i].prefix == static_cast<int>(row.library))
      if (void* address = find_function(objects[i], row.mangled)) return address;
  return nullptr;
}

// Row `i`'s original, or nullptr while it is still its first call.
void* resolved(int i) {
  void* address = __atomic_load_n(&g_originals[i], __ATOMIC_RELAXED);
  return address == g_first_calls[i] ? nullptr : address;
}

void publish(int i, void* address) {
  if (address != nullptr) __atomic_store_n(&g_originals[i], address, __ATOMIC_RELAXED);
}

}  // namespace

void* find_original(HookId id) {
  const int index = static_cast<int>(id);
  const HookRow& hook = kHookRows[index];
  if (void* address = resolved(index)) return address;
  const char* prefixes[kLibraryCount];
  for (int i = 0; i < kLibraryCount; ++i) prefixes[i] = library_prefix(kLibraries[i]);
  LoadedLibrary objects[kMaxObjects];
  int count = find_loaded_libraries(prefixes, kLibraryCount, objects, kMaxObjects);
  bool named_loaded = false;
  for (int i = 0; i < count; ++i) named_loaded |= objects[i].prefix == static_cast<int>(hook.library);
  void* address = named_loaded ? look_up_in(objects, count, hook) : find_function_anywhere(hook.mangled);
  publish(index, address);
  // Only processes that call into torch pay for the pass; the first thread
  // here runs it, and another that comes meanwhile looks up its own row.
  static bool every_row_started = false;
  if (address != nullptr && !__atomic_load_n(&every_row_started, __ATOMIC_ACQUIRE) &&
      !__atomic_exchange_n(&every_row_started, true, __ATOMIC_ACQ_REL)) {
    for (int i = 0; i < kHookCount; ++i)
      if (resolved(i) == nullptr) publish(i, look_up_in(objects, count, kHookRows[i]));
    torch_resolved();
  }
  return address;
}

void* resolve_original(HookId id) {
  void* address = find_original(id);
  if (address == nullptr) {
    const HookRow& hook = kHookRows[static_cast<int>(id)];
    say(FSDPSKIP_MESSAGE_ERROR, "cannot find the original of %s (%s) in any loaded object; aborting", hook.id, hook.mangled);
    abort();
  }
  return address;
}

}  // namespace fsdpskip
