// What the plugin's files share: plugin.cc (the C adapter between the
// preload's hook table and the Tracker), plugin_exit.cc (the summary, the
// report and the stops) and, in the tests' faults build, plugin_faults.cc
// (failures injected into the callbacks, fault_point.h). Internal to the
// plugin.
#pragma once

#include <string>
#include <vector>

#include "../common/plugin_abi.h"
#include "owned_pages.h"
#include "tracker.h"

#define FSDPSKIP_PLUGIN_INTERNAL __attribute__((visibility("hidden")))

namespace fsdpskip {

// The preload's side of the ABI, from fsdpskip_plugin_load on.
extern const fsdpskip_host* g_preload FSDPSKIP_PLUGIN_INTERNAL;

FSDPSKIP_PLUGIN_INTERNAL void say(fsdpskip_message kind, const std::string& text);

// A callback that failed inside (plugin.cc's `guarded`): counted for the
// summary and the report, said once. Allocates nothing.
FSDPSKIP_PLUGIN_INTERNAL void internal_error(const char* callback, const char* what) noexcept;

// At exit (the preload's atexit) or before a stop: the summary, the pending
// lines and the report.
FSDPSKIP_PLUGIN_INTERNAL void finish();

// Training's first collective (Tracker::collective_started said it began).
FSDPSKIP_PLUGIN_INTERNAL void training_began(size_t bytes, bool rank0_data_seen);

// Stops the process before `access` touches a skipped storage that cannot be
// given its values (Tracker::set_stop). Does not return.
FSDPSKIP_PLUGIN_INTERNAL void materialize_failed(const SkipSite& site, const std::string& why, const char* access);

// Stops the process before `collective` when it would send skipped values
// it could not give back (Tracker::sending); returns when there are none.
FSDPSKIP_PLUGIN_INTERNAL void stop_unless_sendable(const std::vector<Tracker::Unsendable>& unsendable,
                                                   const std::string& collective);

}  // namespace fsdpskip
