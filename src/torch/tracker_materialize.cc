// Materializing: a skipped storage given the values it would have had
// without fsdpskip (its recipe replayed) before anything fsdpskip does not
// skip touches it: a fault on its guarded pages, a system call, a kernel
// that runs on it, a send, training's start (owned_pages.h says why).
#include <ATen/Functions.h>
#include <sys/mman.h>

#include <cstring>

#include "tracker_detail.h"

namespace fsdpskip {
using namespace tracker_detail;

void Tracker::materialize(const at::Tensor& tensor, const char* access) {
  c10::StorageImpl* storage = storage_of(tensor);
  if (storage == nullptr || storages_.pending() == 0) return;
  void* context;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    StorageRecord* record = find_pending_locked(storage);
    if (record == nullptr) return;
    context = record->context;
  }
  materialize_context(context, access);
}

void Tracker::materialize_pending(const char* access) {
  std::vector<void*> contexts;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    sweep_ended_locked();
    storages_.for_each([&](const StorageRecord& record) {
      if (record.pending()) contexts.push_back(record.context);
    });
  }
  for (void* context : contexts) materialize_context(context, access);
}

bool Tracker::touched(const void* address, size_t bytes, bool fault, const char* access) {
  OwnedPages& pages = OwnedPages::instance();
  if (fault) {
    bool guarded = false;
    void* context = pages.mapping_at(address, &guarded);
    if (context == nullptr) return false;
    // A fault on one of its mappings that is not guarded: another thread
    // materialized it meanwhile, and the access may be retried; the same
    // address faulting again and again is not fsdpskip's to answer.
    thread_local const void* last_fault = nullptr;
    thread_local int repeats = 0;
    repeats = address == last_fault ? repeats + 1 : 0;
    last_fault = address;
    if (guarded) materialize_context(context, access);
    return guarded || repeats < 3;
  }
  // Each guarded mapping the range overlaps, one at a time; a mapping that
  // stayed guarded (a stop already said why) ends the walk.
  for (void* context = pages.guarded_in(address, bytes), *last = nullptr; context != nullptr && context != last;
       last = context, context = pages.guarded_in(address, bytes))
    materialize_context(context, access);
  return true;
}

void Tracker::materialize_context(void* context, const char* access) {
  std::lock_guard<std::mutex> one_at_a_time(materializing_);
  OwnedPages& pages = OwnedPages::instance();
  c10::intrusive_ptr<c10::StorageImpl> held;  // alive while it is written
  SkippedCalls calls;
  std::optional<SkipSite> unreplayable;
  std::string why;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    StorageRecord* record = storages_.find_context(context);
    if (record == nullptr || !record->pending()) {
      pages.unguard(context);  // nothing to give it (another thread did): accessible as it is
      return;
    }
    if (record->unreplayable != nullptr) {
      unreplayable = *record->site;
      why = record->unreplayable;
    } else {
      held = c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(record->storage);
      calls = record->calls;
    }
  }
  if (unreplayable) {
    if (materialize_failed_ != nullptr) materialize_failed_(*unreplayable, why, access);
    return;  // a tracker without its plugin (the unit tests): left guarded
  }
  // The recipe is replayed into scratch pages, which then replace the
  // guarded ones in one step: another thread that touches the storage
  // meanwhile faults and waits above, and never sees it half written. A
  // storage that is not guarded (its guard refused, or audit mode, where
  // nothing was skipped) is replayed in place: nobody waits on it.
  size_t length = OwnedPages::length_of(context);
  void* scratch = pages.guarded(context) ? pages.scratch_pages(context) : nullptr;
  try {
    if (scratch == nullptr) {
      pages.unguard(context);
      replay(held.get(), calls);
    } else {
      at::Tensor bytes = at::from_blob(scratch, {static_cast<int64_t>(length)}, at::TensorOptions().dtype(at::kByte));
      replay(bytes.storage().unsafeGetStorageImpl(), calls);
      if (!pages.replace_guarded(context, scratch)) {
        pages.unguard(context);
        std::memcpy(compat::data_ptr(*held).get(), scratch, held->nbytes());
        munmap(scratch, length);
      }
    }
  } catch (const std::exception& error) {
    if (scratch != nullptr) munmap(scratch, length);
    std::optional<SkipSite> site;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (StorageRecord* record = storages_.find(held.get()); record && record->site) site = *record->site;
    }
    if (site && materialize_failed_ != nullptr)
      materialize_failed_(*site, std::string("its replay failed: ") + error.what(), access);
    throw;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (StorageRecord* record = find_pending_locked(held.get())) {
    materialized_locked(*record);
    if (log_level_ >= FSDPSKIP_LOG_DEBUG && say_ != nullptr) {
      std::string line = std::string("materialized before ") + access + ":";
      log(FSDPSKIP_MESSAGE_DEBUG, line.c_str(), held.get());
    }
  }
}

void Tracker::reading(fsdpskip_kernel kernel, const at::Tensor& self, const void* other) {
  if (storages_.pending() == 0) return;
  materialize(self, kernel_name(kernel));
  if (kernel == FSDPSKIP_OR) materialize(*static_cast<const at::Tensor*>(other), kernel_name(kernel));
}

}  // namespace fsdpskip
