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

// The plugin, loaded on first use in an active process; nullptr when this
// process is inactive or the plugin cannot serve it (one line says why).
const fsdpskip_plugin* active_plugin();

}  // namespace fsdpskip
