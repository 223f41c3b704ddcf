#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

namespace fsdpskip {
namespace {

struct MessageKind {
  fsdpskip_log_level least;  // the lowest FSDPSKIP_LOG that prints it
  const char* label;
  int cap;                   // at most this many per process (0: no cap)
  const char* when_capped;   // said once, instead of the first one over the cap
};

// By fsdpskip_message. A pending storage's cap keeps stderr readable: the
// report lists them all.
constexpr MessageKind kKinds[] = {
    /* ERROR   */ {FSDPSKIP_LOG_QUIET, "error: ", 0, nullptr},
    /* WARNING */ {FSDPSKIP_LOG_QUIET, "warning: ", 8, "further warnings suppressed"},
    /* SUMMARY */ {FSDPSKIP_LOG_SUMMARY, "", 0, nullptr},
    /* ADVICE  */ {FSDPSKIP_LOG_SUMMARY, "warning: ", 0, nullptr},
    /* PENDING */ {FSDPSKIP_LOG_SUMMARY, "error: ", 20,
                   "more storages are pending than are listed here; FSDPSKIP_REPORT lists them all"},
    /* PENDING_IN_TRAINING */ {FSDPSKIP_LOG_SUMMARY, "warning: ", 20,
                               "more storages are pending or never written than are listed here; "
                               "FSDPSKIP_REPORT lists them all"},
    /* DEBUG   */ {FSDPSKIP_LOG_DEBUG, "", 0, nullptr},
    /* TRACE   */ {FSDPSKIP_LOG_TRACE, "", 0, nullptr},
};
constexpr int kKindCount = sizeof kKinds / sizeof *kKinds;
static_assert(kKindCount == FSDPSKIP_MESSAGE_TRACE + 1, "one row per fsdpskip_message");

int g_level = FSDPSKIP_LOG_SUMMARY;
bool g_stderr_closed_at_start = false;
int g_said[kKindCount];  // racy by design: caps, not exact counts

void write_line(const char* label, const char* format, va_list args) {
  if (g_stderr_closed_at_start) return;
  char line[4096];
  int prefix = snprintf(line, sizeof line, "fsdpskip: %s", label);
  int body = vsnprintf(line + prefix, sizeof line - prefix - 1, format, args);
  size_t length = prefix + (body < 0 ? 0 : body);
  if (length > sizeof line - 2) length = sizeof line - 2;
  line[length++] = '\n';
  // stderr may be a pipe whose reader is gone: the write must fail, not kill
  // a program that never ignored SIGPIPE (a LibTorch binary) with its exit
  // status changed. The signal is blocked for the write and, if the write
  // raised it, taken back.
  sigset_t pipe_signal, previous, pending;
  sigemptyset(&pipe_signal);
  sigaddset(&pipe_signal, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_signal, &previous);
  bool was_pending = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
  int saved = errno;
  if (write(STDERR_FILENO, line, length) < 0 && errno == EPIPE && !was_pending) {
    const timespec no_wait = {0, 0};
    sigtimedwait(&pipe_signal, nullptr, &no_wait);
  }
  errno = saved;
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
}

void write_line(const char* label, const char* format, ...) {
  va_list args;
  va_start(args, format);
  write_line(label, format, args);
  va_end(args);
}

}  // namespace

void check_stderr_at_start() {
  int saved = errno;
  g_stderr_closed_at_start = fcntl(STDERR_FILENO, F_GETFD) < 0;
  errno = saved;
}

void set_log_level(fsdpskip_log_level level) { __atomic_store_n(&g_level, level, __ATOMIC_RELAXED); }

bool says(fsdpskip_message kind) {
  return kind >= 0 && kind < kKindCount && __atomic_load_n(&g_level, __ATOMIC_RELAXED) >= kKinds[kind].least;
}

void say(fsdpskip_message kind, const char* format, ...) {
  if (!says(kind)) return;
  const MessageKind& row = kKinds[kind];
  if (row.cap) {
    int n = __atomic_fetch_add(&g_said[kind], 1, __ATOMIC_RELAXED);
    if (n > row.cap) return;
    if (n == row.cap) return write_line(row.label, "%s", row.when_capped);
  }
  va_list args;
  va_start(args, format);
  write_line(row.label, format, args);
  va_end(args);
}

void say_text(fsdpskip_message kind, const char* text) { say(kind, "%s", text ? text : ""); }

}  // namespace fsdpskip
