// Access to guarded pages: the plugin protects the pages of every skipped
// storage (src/torch/owned_pages.h), and what touches them is caught here,
// in the library that is loaded first and never unloaded.
//
// - A fault: the SIGSEGV handler asks the plugin (touched), which gives
//   the storage its values and unguards it; the access is then retried and
//   sees them. A fault the plugin does not own goes to the program's own
//   handler, as if fsdpskip's were not there.
// - The program's handlers: once the plugin is loaded, sigaction() and
//   signal() for SIGSEGV set the handler chained behind fsdpskip's instead
//   of replacing it (Python's faulthandler, a JVM, a debugger's), and report
//   the chained one as the old one.
// - System calls that would get EFAULT on a guarded page, and stdio (whose
//   system calls cannot be interposed): memory_calls.def's rows have the
//   plugin materialize what they touch before they run.
//
// The handler runs the plugin's replay (torch's own kernels) on the thread
// whose access faulted, on that thread's stack (not an alternate one: a
// replay needs more than a signal stack holds). That is sound for a fault,
// which is synchronous: the thread was running a kernel, numpy or a system
// library's copy, none of which holds a lock the replay takes. The handler
// is installed with SA_NODEFER, so that a fault inside a replay reaches the
// program's handler instead of killing the process silently.
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <atomic>

#include "guarded_access.h"
#include "libc_next.h"

namespace fsdpskip {
namespace {

std::atomic<const fsdpskip_plugin*> g_guarding{nullptr};  // set once the plugin is loaded

using Sigaction = int (*)(int, const struct sigaction*, struct sigaction*);
using Signal = sighandler_t (*)(int, sighandler_t);
Sigaction g_libc_sigaction;
Signal g_libc_signal;
// The program's SIGSEGV action, behind fsdpskip's (under g_chained_lock).
struct sigaction g_chained;
pthread_mutex_t g_chained_lock = PTHREAD_MUTEX_INITIALIZER;

// libc's definitions are looked up by resolve_guarded_access() at start-up,
// before any fork, so that no child ever waits on a dynamic linker lock a
// vanished thread held; lazily (libc_next) only if something calls one
// before the preload's constructor ran.
// Each memory call's original.
#define MEMORY_CALL(name, result, parameters, arguments, buffers) result(*g_##name) parameters;
#include "memory_calls.def"
#undef MEMORY_CALL

void call_chained(int signal_number, siginfo_t* info, void* context) {
  struct sigaction next = g_chained;  // a copy: the program may change it meanwhile
  bool fault = info != nullptr && info->si_code > 0;
  if (next.sa_flags & SA_RESETHAND) {
    pthread_mutex_lock(&g_chained_lock);
    g_chained.sa_handler = SIG_DFL;
    g_chained.sa_flags &= ~SA_SIGINFO;
    pthread_mutex_unlock(&g_chained_lock);
  }
  bool takes_info = next.sa_flags & SA_SIGINFO;
  if ((takes_info && next.sa_sigaction != nullptr) ||
      (!takes_info && next.sa_handler != SIG_DFL && next.sa_handler != SIG_IGN)) {
    // As the kernel would: its mask, and the signal itself unless SA_NODEFER.
    sigset_t blocked = next.sa_mask, previous;
    if (!(next.sa_flags & SA_NODEFER)) sigaddset(&blocked, signal_number);
    pthread_sigmask(SIG_BLOCK, &blocked, &previous);
    if (takes_info) next.sa_sigaction(signal_number, info, context);
    else next.sa_handler(signal_number);
    pthread_sigmask(SIG_SETMASK, &previous, nullptr);
    return;
  }
  // A signal sent to be ignored is ignored; a fault cannot be (the kernel
  // would not let it): the default action, as without fsdpskip.
  if (!takes_info && next.sa_handler == SIG_IGN && !fault) return;
  struct sigaction default_action = {};
  default_action.sa_handler = SIG_DFL;
  g_libc_sigaction(signal_number, &default_action, nullptr);
  // A fault is raised again by its access when this returns; a sent signal
  // is sent again, to the default action now.
  if (!fault) raise(signal_number);
}

void on_fault(int signal_number, siginfo_t* info, void* context) {
  int saved_errno = errno;
  const fsdpskip_plugin* plugin = g_guarding.load(std::memory_order_acquire);
  if (plugin != nullptr && info != nullptr && info->si_code == SEGV_ACCERR &&
      plugin->touched(info->si_addr, 1, true, "a read or write that fsdpskip does not follow (numpy, a Python "
                                              "buffer, a kernel or custom op it does not intercept)")) {
    errno = saved_errno;
    return;  // the access runs again, on the storage's values
  }
  call_chained(signal_number, info, context);
  errno = saved_errno;
}

inline const fsdpskip_plugin* guarding() {
  const fsdpskip_plugin* plugin = g_guarding.load(std::memory_order_relaxed);
  return plugin != nullptr && plugin->guarded_count() != 0 ? plugin : nullptr;
}

// size * count, or all of memory from there when that overflows (fread's
// and fwrite's bytes: libc reports the overflow itself).
inline size_t product(size_t size, size_t count) {
  size_t bytes;
  return __builtin_mul_overflow(size, count, &bytes) ? SIZE_MAX : bytes;
}

// What a memory call touches, given its values first.
struct Touches {
  const fsdpskip_plugin* plugin;
  const char* call;
  void touch(const void* begin, size_t bytes) const {
    if (begin != nullptr && bytes != 0) plugin->touched(begin, bytes, false, call);
  }
  void touch_iovec(const struct iovec* iov, int count) const {
    if (iov == nullptr) return;
    for (int i = 0; i < count; ++i) touch(iov[i].iov_base, iov[i].iov_len);
  }
};

}  // namespace

void resolve_guarded_access() {
  libc_next("sigaction", &g_libc_sigaction);
  libc_next("signal", &g_libc_signal);
#define MEMORY_CALL(name, result, parameters, arguments, buffers) libc_next(#name, &g_##name);
#include "memory_calls.def"
#undef MEMORY_CALL
}

void guard_faults(const fsdpskip_plugin* plugin) {
  Sigaction libc_sigaction = libc_next("sigaction", &g_libc_sigaction);
  libc_next("signal", &g_libc_signal);
  if (libc_sigaction == nullptr || g_guarding.load() != nullptr) return;
  struct sigaction ours = {};
  ours.sa_sigaction = on_fault;
  ours.sa_flags = SA_SIGINFO | SA_NODEFER | SA_RESTART;
  sigemptyset(&ours.sa_mask);
  pthread_mutex_lock(&g_chained_lock);
  int installed = libc_sigaction(SIGSEGV, &ours, &g_chained);
  if (installed == 0) g_guarding.store(plugin, std::memory_order_release);
  pthread_mutex_unlock(&g_chained_lock);
  // A child forked while another thread held the lock must not wait on it.
  pthread_atfork(nullptr, nullptr, [] { pthread_mutex_init(&g_chained_lock, nullptr); });
}

}  // namespace fsdpskip

using fsdpskip::g_chained;
using fsdpskip::g_chained_lock;

extern "C" __attribute__((visibility("default"))) int sigaction(int signal_number, const struct sigaction* action,
                                                                 struct sigaction* old_action) {
  using namespace fsdpskip;
  Sigaction libc_sigaction = libc_next("sigaction", &g_libc_sigaction);
  if (libc_sigaction == nullptr) {
    errno = ENOSYS;
    return -1;
  }
  if (signal_number != SIGSEGV) return libc_sigaction(signal_number, action, old_action);
  // Under the lock guard_faults installs under: a change racing the
  // installation lands either before it (and is chained) or after it.
  pthread_mutex_lock(&g_chained_lock);
  int result = 0;
  if (g_guarding.load(std::memory_order_acquire) == nullptr) {
    result = libc_sigaction(signal_number, action, old_action);
  } else {
    if (old_action != nullptr) *old_action = g_chained;
    if (action != nullptr) g_chained = *action;
  }
  pthread_mutex_unlock(&g_chained_lock);
  return result;
}

extern "C" __attribute__((visibility("default"))) sighandler_t signal(int signal_number, sighandler_t handler) {
  using namespace fsdpskip;
  Signal libc_signal = libc_next("signal", &g_libc_signal);
  if (signal_number != SIGSEGV || g_guarding.load(std::memory_order_acquire) == nullptr) {
    if (libc_signal == nullptr) {
      errno = ENOSYS;
      return SIG_ERR;
    }
    return libc_signal(signal_number, handler);
  }
  pthread_mutex_lock(&g_chained_lock);
  // A SA_SIGINFO handler shares its place with sa_handler (a union), as signal() reports it.
  sighandler_t old = g_chained.sa_handler;
  g_chained = {};
  g_chained.sa_handler = handler;
  g_chained.sa_flags = SA_RESTART;  // signal()'s BSD semantics in glibc
  pthread_mutex_unlock(&g_chained_lock);
  return old;
}

// Each row of memory_calls.def: its buffers given their values while some
// pages are guarded, then libc's own call.
#define MEMORY_CALL(name, result, parameters, arguments, buffers)                       \
  extern "C" __attribute__((visibility("default"))) result name parameters {             \
    using namespace fsdpskip;                                                            \
    if (const fsdpskip_plugin* plugin = guarding()) {                                    \
      Touches touches{plugin, #name};                                                    \
      [&](const Touches& t) {                                                            \
        auto touch = [&](const void* begin, size_t bytes) { t.touch(begin, bytes); };    \
        auto touch_iovec = [&](const struct iovec* iov, int count) { t.touch_iovec(iov, count); }; \
        (void)touch, (void)touch_iovec;                                                  \
        buffers;                                                                         \
      }(touches);                                                                        \
    }                                                                                    \
    auto fn = libc_next(#name, &g_##name);                                                    \
    if (fn == nullptr) { /* an error: -1 from a system call, 0 items from stdio */     \
      errno = ENOSYS;                                                                    \
      return static_cast<result>(-1) < 0 ? static_cast<result>(-1) : 0;                 \
    }                                                                                    \
    return fn arguments;                                                                 \
  }
#include "memory_calls.def"
#undef MEMORY_CALL
