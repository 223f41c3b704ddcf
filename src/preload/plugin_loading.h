// Opening the plugin: the search of plugin_search.h run against the
// libtorch_cpu this process has loaded, then dlopen and the plugin ABI's
// handshake. preload.cc decides when (once, on first use); this file how.
#pragma once

#include "../common/plugin_abi.h"

namespace fsdpskip {

// The plugin built for this process's libtorch_cpu, loaded and handed
// `host`; nullptr, with one line saying why, when there is none it may use.
// `plugin_override`: FSDPSKIP_PLUGIN's value ("" unset); `plugin_cache`:
// the user's plugin directory ("" none); `preload_path`: this library's
// absolute path. Not reentrant: its buffers are static (the caller runs it
// under pthread_once, maybe on a thread with a small stack).
const fsdpskip_plugin* open_plugin(const char* preload_path, const char* plugin_override, const char* plugin_cache,
                                   fsdpskip_host* host);

}  // namespace fsdpskip
