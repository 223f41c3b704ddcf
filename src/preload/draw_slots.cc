#include "draw_slots.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "hooks.h"
#include "loaded_objects.h"

namespace fsdpskip {
namespace {

constexpr HookId kDrawRows[] = {HookId::generator_random, HookId::generator_random64};
constexpr int kMaxSlots = 8;

struct Slot {
  void** address;
  void* forwarder;
  void* original;
  int protection;  // its page's, before it was made writable
};

// Under g_lock: the plugin's requests and torch_resolved() are one
// sequence, so that a slot is never pointed away after a debt began. It is
// taken last (the plugin holds its own locks around watch_draws).
pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
Slot g_slots[kMaxSlots];
int g_slot_count = -1;  // -1: not looked for yet
bool g_pointed_away = false;
bool g_plugin_watches = false;  // the plugin asked once: from then on only it decides

// A child forked while another thread held the lock gets it afresh. (Taking
// it before a fork would invert the order against the plugin's locks, which
// its own fork handler takes.) A fork can only come in the middle of
// torch_resolved(): the plugin's fork handler waits for the locks its
// callers of watch_draws hold. g_pointed_away is set before the first slot
// is pointed away, so the child's next watch_draws(true) restores them all.
// Registered when the preload loads: pthread_atfork takes glibc's fork lock,
// which a fork holds while it waits for the plugin's locks.
__attribute__((constructor)) void register_fork_handler() {
  pthread_atfork(nullptr, nullptr, [] { pthread_mutex_init(&g_lock, nullptr); });
}

void lock() { pthread_mutex_lock(&g_lock); }

uintptr_t page_of(const void* address) {
  return reinterpret_cast<uintptr_t>(address) & ~(static_cast<uintptr_t>(sysconf(_SC_PAGESIZE)) - 1);
}

// The protection of the mapping that holds `address`, from /proc/self/maps;
// -1 when it cannot be told.
int protection_of(const void* address) {
  int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  auto wanted = reinterpret_cast<uintptr_t>(address);
  char buffer[8192];
  size_t held = 0;
  int protection = -1;
  for (bool more = true; more && protection < 0;) {
    // The system call itself: the preload's read() would ask the plugin
    // about the buffer, under the locks this runs inside.
    ssize_t got = syscall(SYS_read, fd, buffer + held, sizeof buffer - held);
    more = got > 0;
    if (got > 0) held += got;
    size_t start = 0;
    for (size_t i = 0; i < held && protection < 0; ++i) {
      if (buffer[i] != '\n') continue;
      buffer[i] = '\0';
      // "begin-end rwxp ..."
      char* cursor = buffer + start;
      uintptr_t begin = strtoull(cursor, &cursor, 16);
      uintptr_t end = *cursor == '-' ? strtoull(cursor + 1, &cursor, 16) : 0;
      if (begin <= wanted && wanted < end && cursor[0] == ' ' && cursor[1] && cursor[2] && cursor[3])
        protection = (cursor[1] == 'r' ? PROT_READ : 0) | (cursor[2] == 'w' ? PROT_WRITE : 0) |
                     (cursor[3] == 'x' ? PROT_EXEC : 0);
      start = i + 1;
    }
    if (start == 0 && held == sizeof buffer) held = 0;  // a line longer than the buffer: not one of ours
    for (size_t i = start; i < held; ++i) buffer[i - start] = buffer[i];
    held -= start;
  }
  close(fd);
  return protection;
}

// libtorch_cpu's slots that the linker bound, or will bind at their first
// call (lazy binding: they hold the PLT's resolver until then), to the
// forwarders; none that already holds torch's own definition (a torch that
// binds these calls inside). The resolver only ever writes the forwarder,
// so a slot it binds meanwhile is at worst watched when it need not be.
void find_slots() {
  const char* prefix = library_prefix(Library::kTorchCpu);
  LoadedLibrary library;
  if (find_loaded_libraries(&prefix, 1, &library, 1) != 1) return;  // not loaded yet: looked for again later
  g_slot_count = 0;
  for (HookId row : kDrawRows) {
    void* forwarder = g_interposers[static_cast<int>(row)];
    void* original = find_function(library, kHookRows[static_cast<int>(row)].mangled);  // torch's own
    void** found[kMaxSlots];
    int count = find_call_slots(library, kHookRows[static_cast<int>(row)].mangled, found, kMaxSlots);
    for (int i = 0; i < count && g_slot_count < kMaxSlots; ++i) {
      int protection = protection_of(found[i]);
      if (original == nullptr || protection < 0 || __atomic_load_n(found[i], __ATOMIC_RELAXED) == original) continue;
      g_slots[g_slot_count++] = Slot{found[i], forwarder, original, protection};
    }
  }
}

void restore_protections() {
  for (int i = 0; i < g_slot_count; ++i)
    if (!(g_slots[i].protection & PROT_WRITE))
      mprotect(reinterpret_cast<void*>(page_of(g_slots[i].address)), 1, g_slots[i].protection);
}

void watch_draws_locked(bool watched) {
  if (watched) {
    if (!g_pointed_away) return;
    for (int i = 0; i < g_slot_count; ++i) __atomic_store_n(g_slots[i].address, g_slots[i].forwarder, __ATOMIC_RELEASE);
    g_pointed_away = false;
    restore_protections();  // a failure leaves a page writable, nothing worse
    return;
  }
  if (g_pointed_away) return;
  if (g_slot_count < 0) find_slots();
  for (int i = 0; i < g_slot_count; ++i) {  // none while not found
    void* page = reinterpret_cast<void*>(page_of(g_slots[i].address));
    if (!(g_slots[i].protection & PROT_WRITE) && mprotect(page, 1, g_slots[i].protection | PROT_WRITE) != 0) {
      restore_protections();
      return;  // the slots stay on the forwarders
    }
  }
  g_pointed_away = g_slot_count > 0;
  for (int i = 0; i < g_slot_count; ++i) __atomic_store_n(g_slots[i].address, g_slots[i].original, __ATOMIC_RELEASE);
}

}  // namespace

void watch_draws(bool watched) {
  lock();
  g_plugin_watches = true;
  watch_draws_locked(watched);
  pthread_mutex_unlock(&g_lock);
}

void torch_resolved() {
  lock();
  if (!g_plugin_watches) watch_draws_locked(false);  // no plugin, no debt: nothing to watch
  pthread_mutex_unlock(&g_lock);
}

}  // namespace fsdpskip
