// Where libtorch_cpu's own draws go. Every CPU draw of every kernel calls
// at::CPUGeneratorImpl::random or random64 through a GOT slot of
// libtorch_cpu's, which the dynamic linker bound to the preload's draw
// forwarders (hooks.def's generator rows). The forwarders matter only while
// a generator owes a skipped init's draws (generator_history.h); the rest
// of the time those slots can point at torch's own definitions, and a draw
// costs what it costs without fsdpskip.
//
// Until a plugin is loaded no generator can owe: the slots are pointed at
// torch when the hook table's rows are first resolved (torch_resolved()).
// From then on the plugin asks (fsdpskip_host's watch_draws), under its lock,
// holding the owing generator's mutex when a debt begins, so that no draw
// from it can start in between. Watched: every slot points at the
// forwarders again before the call returns, by plain stores, which cannot
// fail (their pages were made writable before they were pointed away).
// Unwatched: the slots point at torch, where their pages could be made
// writable; otherwise they stay on the forwarders, which test the owing
// word themselves. Calls of these functions from other objects always keep
// the forwarders.
//
// This rests on torch loading the slot at each call made under the
// generator's mutex, as a PLT call does. A torch built with -fno-plt calls
// through its GOT (the GLOB_DAT slots found here too), and a compiler may
// hoist that load out of a loop; a loop that took the generator's mutex on
// each pass and drew inside it could then keep torch's address after a
// debt began. No torch kernel has that shape: they take the mutex once,
// around all their draws.
#pragma once

namespace fsdpskip {

void watch_draws(bool watched);

// The hook table's originals were just looked up (the process's first call
// into torch through a row).
void torch_resolved();

}  // namespace fsdpskip
