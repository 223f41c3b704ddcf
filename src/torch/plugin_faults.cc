// A test build only (tests/CMakeLists.txt: libfsdpskip_torch_faults.so):
// FSDPSKIP_INJECT_FAULT=<callback>[,<callback>...] makes those callbacks
// throw std::bad_alloc as they start; <callback>:allocation, at its first
// allocation by the plugin's own code (its operator new below is the
// plugin's alone, bound inside it: torch's allocations never come here).
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "fault_point.h"
#include "plugin_detail.h"

namespace fsdpskip {
namespace {

thread_local bool t_armed = false;

// Whether the next allocation of the plugin's own code fails (and disarms).
bool allocation_fails() {
  if (!t_armed) return false;
  t_armed = false;
  return true;
}

}  // namespace

FaultPoint::FaultPoint(const char* callback) : previous(t_armed) {  // restored on the way out: nested callbacks
  static const char* injected = getenv("FSDPSKIP_INJECT_FAULT");
  size_t length = strlen(callback);
  for (const char* item = injected; item != nullptr && *item != '\0';) {
    const char* end = strchrnul(item, ',');
    if (static_cast<size_t>(end - item) >= length && strncmp(item, callback, length) == 0) {
      if (item + length == end) throw std::bad_alloc();
      if (strncmp(item + length, ":allocation", end - item - length) == 0) t_armed = true;
    }
    item = *end ? end + 1 : end;
  }
}

FaultPoint::~FaultPoint() { t_armed = previous; }

}  // namespace fsdpskip

// The plugin's own allocations (see FaultPoint). The block comes from the
// operator new the rest of the process uses, which every operator delete
// pairs with (a string grown inside libstdc++ is freed by code inlined
// here, and the other way round): a sanitizer's in the global scope, else
// the next one after the plugin's own (libstdc++'s).
void* operator new(size_t size) {
  if (fsdpskip::allocation_fails()) throw std::bad_alloc();
  using New = void* (*)(size_t);
  static const New process_new = [] {
    auto found = reinterpret_cast<New>(dlsym(RTLD_DEFAULT, "_Znwm"));
    return found != static_cast<New>(&::operator new) ? found : reinterpret_cast<New>(dlsym(RTLD_NEXT, "_Znwm"));
  }();
  return process_new(size);
}
