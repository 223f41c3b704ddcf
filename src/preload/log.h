// One-line diagnostics on stderr, formatted on the stack and written with a
// single write(2): no stdio buffers, no allocation, safe in any process.
#pragma once

namespace fsdpskip {

// Prints "fsdpskip: <message>\n". Always printed: for errors the user must see.
__attribute__((format(printf, 1, 2))) void log_error(const char* format, ...);

// Like log_error, but the process prints at most kMaxWarnings of them.
__attribute__((format(printf, 1, 2))) void log_warning(const char* format, ...);

constexpr int kMaxWarnings = 8;

}  // namespace fsdpskip
