// Access to the pages the plugin guards (guarded_access.cc): the SIGSEGV
// handler, the program's own handlers chained behind it, and the memory
// calls of memory_calls.def.
#pragma once

#include "../common/plugin_abi.h"

namespace fsdpskip {

// What the preload exports for this job beside the hook table: the signal
// functions and memory_calls.def's rows.
inline constexpr const char* kGuardedAccessFunctions[] = {
    "sigaction", "signal",
#define MEMORY_CALL(name, result, parameters, arguments, buffers) #name,
#include "memory_calls.def"
#undef MEMORY_CALL
};

// Looks libc's sigaction, signal and memory calls up (the preload's
// constructor, before the program can fork).
void resolve_guarded_access();

// Once the plugin is loaded: installs the SIGSEGV handler that has the
// plugin materialize what a fault touches, keeping the program's handler
// behind it, and lets the memory calls ask the plugin too.
void guard_faults(const fsdpskip_plugin* plugin);

}  // namespace fsdpskip
