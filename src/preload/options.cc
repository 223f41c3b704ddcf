#include "options.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

namespace fsdpskip {

// The options table, one row per variable fsdpskip itself defines:
//   FSDPSKIP             auto (default) | on | off | audit: when to act
//   FSDPSKIP_LOCAL_RANK  overrides the launcher's local rank variables
//   FSDPSKIP_LOG         quiet | summary (default) | debug | trace
//   FSDPSKIP_REPORT      per-process JSON report path template (%r %l %p %h %j)
//   FSDPSKIP_PLUGIN      path of libfsdpskip_torch.so (default: beside the preload)
// and the launchers' variables it reads:
const char* const kLocalRankVariables[] = {
    "FSDPSKIP_LOCAL_RANK",
    "LOCAL_RANK",                  // torchrun, accelerate
    "SLURM_LOCALID",               // srun
    "OMPI_COMM_WORLD_LOCAL_RANK",  // Open MPI
    "MPI_LOCALRANKID",             // MPICH, Intel MPI
    "PALS_LOCAL_RANKID",           // HPE PALS (Cray)
};
const int kLocalRankVariableCount = sizeof kLocalRankVariables / sizeof *kLocalRankVariables;

const char* const kRankVariables[] = {"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
                                      "PALS_RANKID"};
const int kRankVariableCount = sizeof kRankVariables / sizeof *kRankVariables;

// accelerate sets both when RAM-efficient FSDP loading is on; transformers'
// is_fsdp_enabled() checks the same two.
const char* const kAutoRequires[] = {"ACCELERATE_USE_FSDP", "FSDP_CPU_RAM_EFFICIENT_LOADING"};
const int kAutoRequiresCount = sizeof kAutoRequires / sizeof *kAutoRequires;

namespace {

// fsdpskip's own variables besides FSDPSKIP_LOCAL_RANK (a local-rank variable).
const char* const kOwnVariables[] = {"FSDPSKIP", "FSDPSKIP_LOG", "FSDPSKIP_REPORT", "FSDPSKIP_PLUGIN"};

bool named(const char* name, size_t length, const char* const* list, int count) {
  for (int i = 0; i < count; ++i)
    if (strncmp(name, list[i], length) == 0 && list[i][length] == '\0') return true;
  return false;
}

template <int N>
bool named(const char* name, size_t length, const char* const (&list)[N]) {
  return named(name, length, list, N);
}

// The reason is a diagnostic: cut short rather than grown.
void explain(Options* options, const char* format, const char* a, const char* b = "") {
  if (snprintf(options->reason, sizeof options->reason, format, a, b) < 0) options->reason[0] = '\0';
}

bool equals_any_case(const char* a, const char* b) { return strcasecmp(a, b) == 0; }

void fail(Options* options, const char* variable, const char* value, const char* accepted) {
  snprintf(options->reason, sizeof options->reason, "%s is malformed", variable);
  snprintf(options->error, sizeof options->error,
           "%s=\"%.64s\" is not valid (accepted: %s); fsdpskip stays inactive in this process",
           variable, value, accepted);
  options->active = false;
}

}  // namespace

bool is_policy_variable(const char* name, size_t length) {
  return named(name, length, kOwnVariables) || named(name, length, kAutoRequires) ||
         named(name, length, kLocalRankVariables) || named(name, length, kRankVariables);
}

bool states_loading(const char* name, size_t length) {
  return (length == 8 && strncmp(name, "FSDPSKIP", 8) == 0) || named(name, length, kAutoRequires);
}

bool parse_truthy(const char* text, bool* value) {
  static const char* const kTrue[] = {"1", "y", "yes", "t", "true", "on"};
  static const char* const kFalse[] = {"0", "n", "no", "f", "false", "off"};
  for (const char* word : kTrue)
    if (equals_any_case(text, word)) return *value = true;
  for (const char* word : kFalse)
    if (equals_any_case(text, word)) return !(*value = false);
  return false;
}

bool parse_rank(const char* text, int* value) {
  if (*text == '\0') return false;
  long result = 0;
  for (const char* p = text; *p; ++p) {
    if (*p < '0' || *p > '9') return false;
    result = result * 10 + (*p - '0');
    if (result > (1 << 20)) return false;
  }
  *value = static_cast<int>(result);
  return true;
}

Options resolve_options(EnvLookup lookup, void* context) {
  Options options;

  if (const char* log = lookup("FSDPSKIP_LOG", context)) {
    static const char* const kLevels[] = {"quiet", "summary", "debug", "trace"};
    bool known = false;
    for (int level = 0; level < 4; ++level)
      if (equals_any_case(log, kLevels[level])) {
        options.log_level = static_cast<fsdpskip_log_level>(level);
        known = true;
      }
    if (!known) return fail(&options, "FSDPSKIP_LOG", log, "quiet, summary, debug, trace"), options;
  }

  const char* mode = lookup("FSDPSKIP", context);
  if (mode == nullptr || equals_any_case(mode, "auto")) options.mode = Mode::kAuto;
  else if (equals_any_case(mode, "on")) options.mode = Mode::kOn;
  else if (equals_any_case(mode, "off")) options.mode = Mode::kOff;
  else if (equals_any_case(mode, "audit")) options.mode = Mode::kAudit;
  else return fail(&options, "FSDPSKIP", mode, "auto, on, off, audit"), options;
  if (options.mode == Mode::kOff) return explain(&options, "FSDPSKIP=%s", mode), options;

  if (options.mode == Mode::kAuto) {
    // Silent unless both are truthy: a process that is not RAM-efficient FSDP
    // loading must not even parse the rest.
    for (const char* variable : kAutoRequires) {
      const char* value = lookup(variable, context);
      bool truthy = false;
      if (value == nullptr) return explain(&options, "mode auto, %s is unset", variable), options;
      if (!parse_truthy(value, &truthy))
        return fail(&options, variable, value, "1, y, yes, t, true, on, 0, n, no, f, false, off"), options;
      if (!truthy) return explain(&options, "mode auto, %s=%s", variable, value), options;
    }
  }

  const char* local_rank_variable = nullptr;
  for (int i = 0; i < kLocalRankVariableCount; ++i) {
    const char* value = lookup(kLocalRankVariables[i], context);
    if (value == nullptr) continue;
    if (!parse_rank(value, &options.local_rank))
      return fail(&options, kLocalRankVariables[i], value, "a non-negative integer"), options;
    local_rank_variable = kLocalRankVariables[i];
    break;
  }
  for (int i = 0; i < kRankVariableCount; ++i) {
    const char* value = lookup(kRankVariables[i], context);
    if (value != nullptr && parse_rank(value, &options.rank)) break;
  }

  options.report_template = lookup("FSDPSKIP_REPORT", context);
  if (options.report_template != nullptr && *options.report_template == '\0')
    options.report_template = nullptr;
  options.plugin_path = lookup("FSDPSKIP_PLUGIN", context);
  options.active = options.local_rank >= 1;
  const char* why = options.mode == Mode::kAuto    ? "mode auto (ACCELERATE_USE_FSDP and FSDP_CPU_RAM_EFFICIENT_LOADING true)"
                    : options.mode == Mode::kOn    ? "mode on (FSDPSKIP=on)"
                                                   : "mode audit (FSDPSKIP=audit)";
  if (local_rank_variable == nullptr) explain(&options, "%s, no local rank variable is set", why);
  else {
    char rank_text[96];
    if (snprintf(rank_text, sizeof rank_text, "local rank %d from %s", options.local_rank, local_rank_variable) < 0)
      rank_text[0] = '\0';
    explain(&options, "%s, %s", why, rank_text);
  }
  return options;
}

}  // namespace fsdpskip
