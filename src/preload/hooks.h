// The hook table (hooks.def) as data: ids, names, and the originals.
#pragma once

namespace fsdpskip {

enum class Library { kTorchCpu, kC10, kTorchCuda };

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

// The soname prefix of a library ("libtorch_cpu.so").
const char* library_prefix(Library library);

// The original definition of a hook, resolved on first use (thread-safe,
// idempotent). Aborts with one line when torch defines no such symbol, which
// cannot happen for a symbol that torch itself just called.
void* original(HookId id);

}  // namespace fsdpskip
