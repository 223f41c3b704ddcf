// libc's own definition of a function the preload also defines.
#pragma once

#include <dlfcn.h>

namespace fsdpskip {

// `name`'s definition in the next object after the preload (libc's),
// looked up once into *cache.
template <typename Fn>
Fn libc_next(const char* name, Fn* cache) {
  Fn fn = __atomic_load_n(cache, __ATOMIC_ACQUIRE);
  if (fn == nullptr) {
    fn = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
    __atomic_store_n(cache, fn, __ATOMIC_RELEASE);
  }
  return fn;
}

}  // namespace fsdpskip
