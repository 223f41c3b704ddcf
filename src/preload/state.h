// Process-wide state of the preload, decided once in its constructor.
#pragma once

#include "../common/plugin_abi.h"
#include "options.h"

namespace fsdpskip {

// Written by the constructor before any other code of the process runs, and
// cleared at exit before the plugin's shutdown work, so interposers that run
// during shutdown forward to the original.
extern bool g_active;
extern Options g_options;

// The plugin of an active process, loaded on first use; nullptr when it
// cannot serve this process (one line says why).
const fsdpskip_plugin* loaded_plugin();

// nullptr in an inactive process (inline: an interposer's common path is one
// load of g_active and the original's call), else loaded_plugin().
inline const fsdpskip_plugin* active_plugin() {
  if (__builtin_expect(!g_active, 1)) return nullptr;
  return loaded_plugin();
}

}  // namespace fsdpskip
