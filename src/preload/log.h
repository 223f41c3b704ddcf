// The one sink for fsdpskip's lines on stderr, the preload's and (through
// fsdpskip_host.say) the plugin's: the "fsdpskip: " prefix, which FSDPSKIP_LOG
// prints which kind of message, and the caps. Each line is formatted on the
// stack and written with a single write(2): no stdio buffers, no
// allocation, safe in any process.
#pragma once

#include "../common/plugin_abi.h"

namespace fsdpskip {

// The level the sink filters by (the decision's FSDPSKIP_LOG).
void set_log_level(fsdpskip_log_level level);

// Once, at start-up: a process started with stderr closed gets no lines, so
// that none lands in a file the program opens later as its descriptor 2.
void check_stderr_at_start();

// Prints "fsdpskip: <label><message>\n" when the level admits `kind` and its
// cap is not reached.
__attribute__((format(printf, 2, 3))) void say(fsdpskip_message kind, const char* format, ...);

// fsdpskip_host.say: a plugin's message, already formatted.
void say_text(fsdpskip_message kind, const char* text);

// True when the level prints `kind` (spares formatting what would be dropped).
bool says(fsdpskip_message kind);

}  // namespace fsdpskip
