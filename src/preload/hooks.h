// The hook table (hooks.def) as data: ids, names, and the originals.
#pragma once

#include "../common/libraries.h"

namespace fsdpskip {

enum class HookId {
#define HOOK(id, library, shape, kernel, mangled) id,
#include "hooks.def"
#undef HOOK
  kCount
};

struct Hook {
  const char* id;
  Library library;
  const char* mangled;
  void* original;  // resolved once, then read with acquire loads
};

extern Hook g_hooks[];
constexpr int kHookCount = static_cast<int>(HookId::kCount);

// Resolves a hook's original (thread-safe, idempotent); nullptr when no
// loaded object defines it.
void* find_original(HookId id);

// find_original, but aborts with one line when torch defines no such symbol,
// which cannot happen for a symbol that torch itself just called.
void* resolve_original(HookId id);

// The original definition of a hook: inline, so an interposer's common path
// is one acquire load and the call.
inline void* original(HookId id) {
  void* address = __atomic_load_n(&g_hooks[static_cast<int>(id)].original, __ATOMIC_ACQUIRE);
  return __builtin_expect(address != nullptr, 1) ? address : resolve_original(id);
}

}  // namespace fsdpskip
