// The storage table (storage_table.h).
#include "storage_table.h"

#include <c10/core/CPUAllocator.h>

#include "compat.h"
#include "owned_pages.h"

namespace fsdpskip {

bool StorageTable::from_cpu_allocator(const c10::StorageImpl* storage, c10::DeleterFnPtr deleter) const {
  return storage->device_type() == c10::DeviceType::CPU &&
         (deleter == cpu_deleter_ || deleter == &c10::free_cpu || OwnedPages::owns(deleter));
}

StorageRecord* StorageTable::find(const c10::StorageImpl* storage) {
  auto& data_ptr = compat::data_ptr(*const_cast<c10::StorageImpl*>(storage));
  auto found = records_.find(data_ptr.get_context());
  if (found == records_.end() || found->second.storage != storage) return nullptr;
  StorageRecord& record = found->second;
  if (record.watched) return record.watched->expired() ? nullptr : &record;
  return data_ptr.get_deleter() == &tracked_deleter ? &record : nullptr;
}

StorageRecord* StorageTable::find_context(void* context) {
  auto found = records_.find(context);
  return found == records_.end() ? nullptr : &found->second;
}

c10::DeleterFnPtr StorageTable::original_deleter(const StorageRecord* record, const c10::StorageImpl* storage) const {
  return record && !record->watched ? record->original_deleter
                                    : compat::data_ptr(*const_cast<c10::StorageImpl*>(storage)).get_deleter();
}

bool StorageTable::owned(const StorageRecord& record) const {
  return !record.watched && OwnedPages::owns(record.original_deleter) &&
         record.storage->device_type() == c10::DeviceType::CPU;
}

void StorageTable::set_state(StorageRecord& record, StorageState state) {
  bool was_pending = record.pending();
  record.state = state;
  if (was_pending && !record.pending()) pending_.fetch_sub(1);
  if (!was_pending && record.pending()) pending_.fetch_add(1);
}

void StorageTable::erase(void* context) {
  auto found = records_.find(context);
  if (found == records_.end()) return;
  set_state(found->second, StorageState::kReceived);  // no longer counted as pending
  if (found->second.watched) --watched_;
  records_.erase(found);
  tracked_.fetch_sub(1);
}

}  // namespace fsdpskip
