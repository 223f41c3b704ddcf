// Process-wide state of the preload: the decision, made in its constructor
// and again whenever the program changes a policy variable.
#pragma once

#include <atomic>

#include "../common/plugin_abi.h"
#include "options.h"

namespace fsdpskip {

// True while the interposers route to the plugin: the process is active, or
// it was and the plugin is loaded (it still accounts for skipped storages).
// Cleared at exit before the plugin's shutdown work, so interposers that run
// during shutdown forward to the original. A flag and nothing more (what the
// active path reads is published by its own acquire and release): relaxed.
extern std::atomic<bool> g_routed __attribute__((visibility("hidden")));
// The generators that owe (fsdpskip_host.owing_generators), written by the plugin.
extern void* g_owing_generators[FSDPSKIP_OWING_WORDS] __attribute__((visibility("hidden")));
inline bool routed() { return g_routed.load(std::memory_order_relaxed); }
extern Options g_options;  // the current decision

// A variable named by `length` bytes at `name` (nullptr: the whole
// environment, clearenv) was set (`set`) or removed. Decides again when the
// policy reads it. Called by the environment interposers after libc's own.
void environment_changed(const char* name, size_t length, bool set);

// The plugin of an active process, loaded on first use; nullptr when it
// cannot serve this process (one line says why).
const fsdpskip_plugin* loaded_plugin();

// nullptr in an inactive process (inline: an interposer's common path is one
// load of g_routed and the original's call), else loaded_plugin().
inline const fsdpskip_plugin* active_plugin() {
  if (__builtin_expect(!routed(), 1)) return nullptr;
  return loaded_plugin();
}

}  // namespace fsdpskip
