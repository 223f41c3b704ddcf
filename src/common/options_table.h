// options.def as data, for the preload's parser, the command and the tests.
// Header-only and freestanding (the preload has no C++ runtime).
#pragma once

#include <stddef.h>
#include <string.h>

namespace fsdpskip {

enum class OptionRole {
  kMode,          // FSDPSKIP: when to act
  kLocalRank,     // the first one present is the local rank
  kAutoRequires,  // `auto` acts only when all of these are true
  kRank,          // the first valid one is the global rank (reports)
  kWorldSize,     // the first valid one is the job's number of ranks (reports)
  kLocalWorldSize,  // the first valid one is the number of ranks on this node (reports)
  kLogLevel,      // FSDPSKIP_LOG
  kStacks,        // FSDPSKIP_STACKS
  kOnPending,     // FSDPSKIP_ON_PENDING
  kReport,        // FSDPSKIP_REPORT
  kPlugin,        // FSDPSKIP_PLUGIN
  kPluginCache,   // XDG_CACHE_HOME: where the user's plugins are
};

struct Option {
  const char* name;
  OptionRole role;
  const char* accepted;
  const char* default_value;
  const char* meaning;
};

inline constexpr Option kOptions[] = {
#define OPTION(name, role, accepted, default_value, meaning) {#name, OptionRole::role, accepted, default_value, meaning},
#include "options.def"
#undef OPTION
};

// The row named by `length` bytes at `name` (not NUL-terminated); nullptr
// when fsdpskip does not read that variable.
inline const Option* find_option(const char* name, size_t length) {
  // Lengths first: `name` may hold a NUL (strncmp would stop there and the
  // row's name be read past its end; found by tools/fuzz).
  for (const Option& option : kOptions)
    if (strlen(option.name) == length && memcmp(option.name, name, length) == 0) return &option;
  return nullptr;
}

constexpr bool has_row(OptionRole role) {
  for (const Option& option : kOptions)
    if (option.role == role) return true;
  return false;
}
static_assert(has_row(OptionRole::kMode) && has_row(OptionRole::kLocalRank) && has_row(OptionRole::kAutoRequires) &&
                  has_row(OptionRole::kRank) && has_row(OptionRole::kWorldSize) &&
                  has_row(OptionRole::kLocalWorldSize) && has_row(OptionRole::kLogLevel) && has_row(OptionRole::kStacks) &&
                  has_row(OptionRole::kOnPending) &&
                  has_row(OptionRole::kReport) &&
                  has_row(OptionRole::kPlugin) && has_row(OptionRole::kPluginCache),
              "options.def has a row for every role");

// The first row of `role`: the only one for the roles of fsdpskip's own
// variables (kMode, kLogLevel, kStacks, kOnPending, kReport, kPlugin, kPluginCache).
inline const Option& option_of(OptionRole role) {
  for (const Option& option : kOptions)
    if (option.role == role) return option;
  return kOptions[0];  // unreachable: see the static_assert above
}

}  // namespace fsdpskip
