// The hook table (hooks.def) as data: each row's id, library, kernel and
// mangled name (one table for the preload, the doctor and the tests), and
// the originals behind the preload's interposers.
#pragma once

#include "../common/libraries.h"
#include "../common/plugin_abi.h"

namespace fsdpskip {

enum class HookId {
#define HOOK(id, library, shape, kernel, mangled) id,
#include "hooks.def"
#undef HOOK
  kCount
};
constexpr int kHookCount = static_cast<int>(HookId::kCount);

struct HookRow {
  const char* id;
  Library library;
  fsdpskip_kernel kernel;
  const char* mangled;
};

inline constexpr HookRow kHookRows[] = {
#define HOOK(id, library, shape, kernel, mangled) {#id, Library::library, kernel, mangled},
#include "hooks.def"
#undef HOOK
};
static_assert(sizeof kHookRows / sizeof kHookRows[0] == kHookCount);

// The preload's own (interposers.cc): each row's original, and the function
// it starts as, which looks the original up on the first call, calls it, and
// leaves g_originals pointing at it (as the dynamic linker's lazy binding
// does). So an interposer's path never tests for null.
extern void* g_originals[kHookCount] __attribute__((visibility("hidden")));
extern void* const g_first_calls[kHookCount] __attribute__((visibility("hidden")));
// Each row's exported definition: what the dynamic linker binds torch's calls to.
extern void* const g_interposers[kHookCount] __attribute__((visibility("hidden")));

// Resolves a row's original (thread-safe, idempotent); nullptr when no loaded
// object defines it.
void* find_original(HookId id);

// find_original, but aborts with one line when torch defines no such symbol,
// which cannot happen for a symbol that torch itself just called.
void* resolve_original(HookId id);

// What an interposer calls: the original, or the row's first call. A relaxed
// load: the address is all that is published (torch's code was loaded before
// anyone could call into it).
inline void* original(HookId id) { return __atomic_load_n(&g_originals[static_cast<int>(id)], __ATOMIC_RELAXED); }

}  // namespace fsdpskip
