#include "options.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "../common/options_table.h"

namespace fsdpskip {
namespace {

// The reason is a diagnostic: cut short rather than grown.
__attribute__((format(printf, 2, 3))) void explain(Options* options, const char* format, ...) {
  va_list args;
  va_start(args, format);
  if (vsnprintf(options->reason, sizeof options->reason, format, args) < 0) options->reason[0] = '\0';
  va_end(args);
}

void fail(Options* options, const Option& option, const char* value) {
  explain(options, "%s is malformed", option.name);
  snprintf(options->error, sizeof options->error,
           "%s=\"%.64s\" is not valid (accepted: %s); fsdpskip stays inactive in this process", option.name, value,
           option.accepted);
  options->active = false;
}

// The position of `text` (any case) among the words of `accepted` (separated
// by ", " and " / "), and in `group` how many " / " came before it; -1 when
// it is none of them.
int word_index(const char* accepted, const char* text, int* group = nullptr) {
  size_t length = strlen(text);
  int index = 0, groups = 0;
  for (const char* word = accepted; *word != '\0'; ++index) {
    size_t word_length = strcspn(word, ",/ ");
    if (word_length == length && strncasecmp(word, text, length) == 0) {
      if (group) *group = groups;
      return index;
    }
    word += word_length;
    while (*word == ',' || *word == ' ' || *word == '/') groups += *word++ == '/';
  }
  return -1;
}

}  // namespace

bool is_policy_variable(const char* name, size_t length) { return find_option(name, length) != nullptr; }

bool states_loading(const char* name, size_t length) {
  const Option* option = find_option(name, length);
  return option && (option->role == OptionRole::kMode || option->role == OptionRole::kAutoRequires);
}

bool parse_truthy(const char* text, bool* value) {
  int group = 0;
  if (word_index(option_of(OptionRole::kAutoRequires).accepted, text, &group) < 0) return false;
  *value = group == 0;
  return true;
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
  // The rows whose value is one of their accepted words, kept as its position.
  const struct {
    OptionRole role;
    void (*keep)(Options* options, int index);
  } kWords[] = {
      {OptionRole::kLogLevel, [](Options* o, int index) { o->log_level = static_cast<fsdpskip_log_level>(index); }},
      {OptionRole::kStacks, [](Options* o, int index) { o->stacks = static_cast<fsdpskip_stacks>(index); }},
      {OptionRole::kOnPending,
       [](Options* o, int index) { o->on_pending = static_cast<fsdpskip_on_pending>(index); }}};
  for (const auto& row : kWords) {
    const Option& option = option_of(row.role);
    if (const char* value = lookup(option.name, context)) {
      int index = word_index(option.accepted, value);
      if (index < 0) return fail(&options, option, value), options;
      row.keep(&options, index);
    }
  }

  const Option& mode = option_of(OptionRole::kMode);
  const char* mode_value = lookup(mode.name, context);
  int mode_index = word_index(mode.accepted, mode_value ? mode_value : mode.default_value);
  if (mode_index < 0) return fail(&options, mode, mode_value), options;
  options.mode = static_cast<Mode>(mode_index);
  if (options.mode == Mode::kOff) return explain(&options, "%s=%s", mode.name, mode_value), options;

  // Silent unless every kAutoRequires row is truthy: a process that is not
  // RAM-efficient FSDP loading must not even parse the rest.
  // `why` names what made the mode act: "mode on (FSDPSKIP=on)".
  char why[128];
  int used = snprintf(why, sizeof why, "mode %s (", mode_value ? mode_value : mode.default_value);
  if (options.mode != Mode::kAuto) used += snprintf(why + used, sizeof why - used, "%s=%s", mode.name, mode_value);
  if (options.mode == Mode::kAuto)
    for (const Option& option : kOptions) {
      if (option.role != OptionRole::kAutoRequires) continue;
      const char* value = lookup(option.name, context);
      bool truthy = false;
      if (value == nullptr) return explain(&options, "mode auto, %s is unset", option.name), options;
      if (!parse_truthy(value, &truthy)) return fail(&options, option, value), options;
      if (!truthy) return explain(&options, "mode auto, %s=%s", option.name, value), options;
      if (used < static_cast<int>(sizeof why))
        used += snprintf(why + used, sizeof why - used, "%s%s=%.16s", why[used - 1] == '(' ? "" : ", ", option.name, value);
    }
  if (used < static_cast<int>(sizeof why)) snprintf(why + used, sizeof why - used, ")");

  const char* local_rank_from = nullptr;
  for (const Option& option : kOptions) {
    const char* value = option.role == OptionRole::kLocalRank ? lookup(option.name, context) : nullptr;
    if (value == nullptr) continue;
    if (!parse_rank(value, &options.local_rank)) return fail(&options, option, value), options;
    local_rank_from = option.name;
    break;
  }
  // For reports only: the first valid row of each role; a malformed one is
  // passed over, never a reason to stay inert.
  struct {
    OptionRole role;
    int* value;
    int least;
  } const for_reports[] = {{OptionRole::kRank, &options.rank, 0},
                           {OptionRole::kWorldSize, &options.world_size, 1},
                           {OptionRole::kLocalWorldSize, &options.local_world_size, 1}};
  for (const auto& wanted : for_reports)
    for (const Option& option : kOptions) {
      const char* text = option.role == wanted.role ? lookup(option.name, context) : nullptr;
      int parsed;
      if (text != nullptr && parse_rank(text, &parsed) && parsed >= wanted.least) {
        *wanted.value = parsed;
        break;
      }
    }

  options.report_template = lookup(option_of(OptionRole::kReport).name, context);
  if (options.report_template != nullptr && *options.report_template == '\0') options.report_template = nullptr;
  options.plugin_path = lookup(option_of(OptionRole::kPlugin).name, context);
  options.cache_home = lookup(option_of(OptionRole::kPluginCache).name, context);
  options.active = options.local_rank >= 1;

  if (local_rank_from == nullptr) explain(&options, "%s, no local rank variable is set", why);
  else
    explain(&options, "%s, local rank %d from %s%s", why, options.local_rank, local_rank_from,
            options.active ? "" : " (local rank 0 reads the checkpoint)");
  return options;
}

}  // namespace fsdpskip
