#include "draw_slots.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
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

Slot g_slots[kMaxSlots];
int g_slot_count = -1;  // -1: not looked for yet
bool g_pointed_away = false;

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
    ssize_t got = read(fd, buffer + held, sizeof buffer - held);
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
  g_slot_count = 0;
  const char* prefix = library_prefix(Library::kTorchCpu);
  LoadedLibrary library;
  if (find_loaded_libraries(&prefix, 1, &library, 1) != 1) return;
  for (HookId row : kDrawRows) {
    void* forwarder = g_interposers[static_cast<int>(row)];
    void* original = find_original(row);
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

}  // namespace

void watch_draws(bool watched) {
  if (watched) {
    if (!g_pointed_away) return;
    for (int i = 0; i < g_slot_count; ++i) __atomic_store_n(g_slots[i].address, g_slots[i].forwarder, __ATOMIC_RELEASE);
    g_pointed_away = false;
    restore_protections();  // a failure leaves a page writable, nothing worse
    return;
  }
  if (g_pointed_away) return;
  if (g_slot_count < 0) find_slots();
  for (int i = 0; i < g_slot_count; ++i) {
    void* page = reinterpret_cast<void*>(page_of(g_slots[i].address));
    if (!(g_slots[i].protection & PROT_WRITE) && mprotect(page, 1, g_slots[i].protection | PROT_WRITE) != 0) {
      restore_protections();
      return;  // the slots stay on the forwarders
    }
  }
  for (int i = 0; i < g_slot_count; ++i) __atomic_store_n(g_slots[i].address, g_slots[i].original, __ATOMIC_RELEASE);
  g_pointed_away = g_slot_count > 0;
}

}  // namespace fsdpskip
