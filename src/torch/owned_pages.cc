#include "owned_pages.h"

#include <c10/core/CPUAllocator.h>
#include <sched.h>
#include <sys/mman.h>

#include <cstring>

#include "compat.h"
#include "zero_pages.h"

namespace fsdpskip {

struct OwnedPages::Mapping {
  char* base;
  size_t length;  // whole pages
  bool guarded = false;
};

OwnedPages& OwnedPages::instance() {
  static OwnedPages* pages = new OwnedPages;  // never destroyed: release() runs until the very end
  return *pages;
}

size_t OwnedPages::owned_bytes() { return system_page_size(); }

void OwnedPages::install() {
  if (installed_.exchange(true)) return;
  c10::Allocator* current = c10::GetCPUAllocator();
  if (current != this) replaced_.store(current);
  // The highest priority: no later registration at a lower one takes the place back.
  c10::SetCPUAllocator(this, UINT8_MAX);
}

void OwnedPages::uninstall() {
  if (!installed_.exchange(false)) return;
  if (c10::Allocator* replaced = replaced_.load()) c10::SetCPUAllocator(replaced, UINT8_MAX);
}

c10::DataPtr OwnedPages::allocate(size_t bytes) const {
  c10::Allocator* replaced = replaced_.load();
  if (bytes < owned_bytes() || !installed_.load(std::memory_order_relaxed)) return replaced->allocate(bytes);
  size_t page = system_page_size();
  size_t length = (bytes + page - 1) & ~(page - 1);
  void* base = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) return replaced->allocate(bytes);  // the map count: an ordinary allocation
  auto* self = const_cast<OwnedPages*>(this);
  Mapping* mapping;
  try {
    mapping = new Mapping{static_cast<char*>(base), length};
    std::lock_guard<std::mutex> lock(self->mutex_);
    self->by_address_.emplace(reinterpret_cast<uintptr_t>(base), mapping);
    self->live_.insert(mapping);
  } catch (...) {
    munmap(base, length);
    throw;
  }
  self->mappings_.fetch_add(1, std::memory_order_relaxed);
  // The context is the mapping, never the data: torch then never takes the
  // storage for a simple allocation (copy-on-write clones keep theirs).
  return {base, mapping, &release, c10::Device(c10::DeviceType::CPU)};
}

c10::DataPtr OwnedPages::adopt(c10::StorageImpl* storage) {
  size_t bytes = storage->nbytes();
  c10::DataPtr& current = compat::data_ptr(*storage);
  if (!installed_.load() || storage->device_type() != c10::DeviceType::CPU || bytes < owned_bytes() ||
      owns(current.get_deleter()))
    return {};
  c10::DataPtr pages = allocate(bytes);
  if (!owns(pages.get_deleter())) return {};  // the kernel refused a mapping
  // Its bytes move with it, whatever they are. Where no whole page of it is
  // in memory (a fresh placeholder), both read as zeros: nothing to copy.
  if (bytes < 4 * system_page_size() || any_page_resident(current.get(), bytes))
    std::memcpy(pages.get(), current.get(), bytes);
  return storage->set_data_ptr(std::move(pages));
}

void OwnedPages::copy_data(void* destination, const void* source, std::size_t bytes) const {
  std::memcpy(destination, source, bytes);
}

void OwnedPages::release(void* context) {
  auto* mapping = static_cast<Mapping*>(context);
  OwnedPages& pages = instance();
  {
    std::lock_guard<std::mutex> lock(pages.mutex_);
    pages.set_guarded_locked(mapping, false);
    pages.by_address_.erase(reinterpret_cast<uintptr_t>(mapping->base));
    pages.live_.erase(mapping);
  }
  munmap(mapping->base, mapping->length);
  pages.mappings_.fetch_sub(1, std::memory_order_relaxed);
  delete mapping;
}

void OwnedPages::set_guarded_locked(Mapping* mapping, bool guarded) {
  if (mapping->guarded == guarded) return;
  mapping->guarded = guarded;
  guarded_count_.fetch_add(guarded ? 1 : -1, std::memory_order_relaxed);
}

bool OwnedPages::guard(void* context) {
  auto* mapping = static_cast<Mapping*>(context);
  // Released first: the pages cost no memory meanwhile, and read as zeros
  // if they are ever unguarded without being materialized.
  madvise(mapping->base, mapping->length, MADV_DONTNEED);
  std::lock_guard<std::mutex> lock(mutex_);
  if (!mapping->guarded && mprotect(mapping->base, mapping->length, PROT_NONE) != 0) return false;
  set_guarded_locked(mapping, true);
  return true;
}

bool OwnedPages::guarded(void* context) {
  auto* mapping = static_cast<Mapping*>(context);
  std::lock_guard<std::mutex> lock(mutex_);
  return live_locked(mapping) && mapping->guarded;
}

void OwnedPages::unguard(void* context) {
  auto* mapping = static_cast<Mapping*>(context);
  std::lock_guard<std::mutex> lock(mutex_);
  if (!live_locked(mapping) || !mapping->guarded) return;
  // Cannot fail: the range is one mapping of ours, given back the access it was made with.
  mprotect(mapping->base, mapping->length, PROT_READ | PROT_WRITE);
  set_guarded_locked(mapping, false);
}

size_t OwnedPages::length_of(void* context) { return static_cast<Mapping*>(context)->length; }

void* OwnedPages::scratch_pages(void* context) {
  void* pages = mmap(nullptr, length_of(context), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return pages == MAP_FAILED ? nullptr : pages;
}

bool OwnedPages::replace_guarded(void* context, void* pages) {
  auto* mapping = static_cast<Mapping*>(context);
  std::lock_guard<std::mutex> lock(mutex_);
  if (!live_locked(mapping) || !mapping->guarded) return false;
  // mremap moves the scratch pages over the guarded ones, unmapping those,
  // atomically for every other thread.
  if (mremap(pages, mapping->length, mapping->length, MREMAP_MAYMOVE | MREMAP_FIXED, mapping->base) == MAP_FAILED)
    return false;
  set_guarded_locked(mapping, false);
  return true;
}

void* OwnedPages::mapping_at(const void* address, bool* guarded) {
  auto at = reinterpret_cast<uintptr_t>(address);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = by_address_.upper_bound(at);
  if (it == by_address_.begin()) return nullptr;
  --it;
  if (at >= it->first + it->second->length) return nullptr;
  *guarded = it->second->guarded;
  return it->second;
}

void* OwnedPages::guarded_in(const void* address, size_t bytes) {
  if (guarded_count() == 0) return nullptr;
  auto begin = reinterpret_cast<uintptr_t>(address), end = begin;
  if (__builtin_add_overflow(begin, bytes ? bytes : 1, &end)) end = UINTPTR_MAX;
  // Asked by system calls, which a signal handler may make (CPython writes
  // its wakeup fd from one) on a thread that holds this lock: it is not
  // waited for forever. A buffer of a handler's is never a storage.
  std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
  for (int tries = 0; !lock.owns_lock() && tries < 10000; ++tries) {
    sched_yield();
    lock.try_lock();
  }
  if (!lock.owns_lock()) return nullptr;
  // From the last mapping that starts at or before `begin` (mappings never
  // overlap) to the last one that starts before `end`.
  auto it = by_address_.upper_bound(begin);
  if (it != by_address_.begin()) --it;
  for (; it != by_address_.end() && it->first < end; ++it)
    if (it->second->guarded && it->first + it->second->length > begin) return it->second;
  return nullptr;
}

}  // namespace fsdpskip
