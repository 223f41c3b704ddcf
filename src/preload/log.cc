#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

namespace fsdpskip {
namespace {

int g_warnings_printed = 0;  // racy by design: a cap, not an exact count

void write_line(const char* format, va_list args) {
  char line[1024];
  int prefix = snprintf(line, sizeof line, "fsdpskip: ");
  int body = vsnprintf(line + prefix, sizeof line - prefix - 1, format, args);
  size_t length = prefix + (body < 0 ? 0 : body);
  if (length > sizeof line - 2) length = sizeof line - 2;
  line[length++] = '\n';
  ssize_t ignored = write(STDERR_FILENO, line, length);
  (void)ignored;
}

}  // namespace

void log_error(const char* format, ...) {
  va_list args;
  va_start(args, format);
  write_line(format, args);
  va_end(args);
}

void log_warning(const char* format, ...) {
  int n = __atomic_fetch_add(&g_warnings_printed, 1, __ATOMIC_RELAXED);
  if (n > kMaxWarnings) return;
  if (n == kMaxWarnings) {
    log_error("further warnings suppressed");
    return;
  }
  va_list args;
  va_start(args, format);
  write_line(format, args);
  va_end(args);
}

}  // namespace fsdpskip
