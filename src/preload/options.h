// The activation policy: environment in, decision out. Pure functions over an
// environment lookup, so the unit tests drive them with a fake environment
// and the library with getenv (which reads environ without allocating). The
// variables, their roles and accepted values are the rows of
// ../common/options.def.
#pragma once

#include <stddef.h>

#include "../common/plugin_abi.h"

namespace fsdpskip {

enum class Mode { kAuto, kOn, kOff, kAudit };  // the order of FSDPSKIP's accepted words

// Returns the variable's value, or nullptr when it is unset.
using EnvLookup = const char* (*)(const char* name, void* context);

struct Options {
  bool active = false;   // this process skips (or audits) parameter inits
  Mode mode = Mode::kAuto;
  int local_rank = -1;   // -1: no local rank found
  int rank = -1;         // global rank, for reports only
  int world_size = -1;   // the job's ranks, for reports only (-1: unknown)
  int local_world_size = -1;  // this node's ranks, for reports only (-1: unknown)
  fsdpskip_log_level log_level = FSDPSKIP_LOG_SUMMARY;
  fsdpskip_stacks stacks = FSDPSKIP_STACKS_PYTHON;
  fsdpskip_on_pending on_pending = FSDPSKIP_ON_PENDING_WARN;
  const char* report_template = nullptr;
  const char* plugin_path = nullptr;  // FSDPSKIP_PLUGIN override
  const char* cache_home = nullptr;   // XDG_CACHE_HOME: the user's plugin cache
  // Set when a variable was malformed: the process stays inert and prints it.
  char error[320] = {0};
  // Why the process is active or not, for FSDPSKIP_LOG=debug and the doctor:
  // "mode auto, FSDP_CPU_RAM_EFFICIENT_LOADING is unset".
  char reason[160] = {0};
};

Options resolve_options(EnvLookup lookup, void* context);

// Helpers, exposed for the unit tests.
// The kAutoRequires rows' words (transformers' strtobool), any case.
bool parse_truthy(const char* text, bool* value);
// A decimal integer in [0, 1<<20], nothing else (no sign, no spaces).
bool parse_rank(const char* text, int* value);

// True when `name` (not NUL-terminated: `length` bytes) is a variable that
// resolve_options reads, so a change to it may change the decision.
bool is_policy_variable(const char* name, size_t length);
// True for the variables whose setting states that a loading is under way:
// FSDPSKIP and the kAutoRequires rows. Set again while active, they open a
// new loading phase (a later model of the same process).
bool states_loading(const char* name, size_t length);

}  // namespace fsdpskip
