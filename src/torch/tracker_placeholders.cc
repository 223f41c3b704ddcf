// Placeholders: a tensor made a parameter while loading, and the
// placeholders nothing wrote by training's first collective.
#include "tracker_detail.h"

namespace fsdpskip {
using namespace tracker_detail;

void Tracker::requires_grad_set(c10::TensorImpl* tensor) {
  if (!loading()) return;
  c10::StorageImpl* storage = compat::storage_of(tensor);
  if (tag(storage)) note_placeholder(storage, *tensor);
}

void Tracker::data_set(const at::TensorBase& self) {
  // `param.data = t` gives a parameter a new storage (to_empty, _apply).
  if (!loading() || !self.requires_grad() || !self.is_leaf()) return;
  c10::StorageImpl* storage = storage_of(self);
  if (tag(storage)) note_placeholder(storage, *self.unsafeGetTensorImpl());
}

void Tracker::note_placeholder(c10::StorageImpl* storage, const c10::TensorImpl& tensor) {
  // A storage that arrived with data (torch.load, a checkpoint's bytes) is
  // in memory; a file mapping or numpy's memory is not the CPU allocator's.
  // One mincore per parameter, while loading only.
  auto* data = static_cast<char*>(compat::data_ptr(*storage).get());
  if (forked_child_ || data == nullptr || storage->nbytes() < 2 * system_page_size() ||
      any_page_resident(data, storage->nbytes()))
    return;
  std::unique_ptr<SkipSite> site = site_of(tensor, *storage, FSDPSKIP_NO_KERNEL);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    StorageRecord* record = storages_.find(storage);
    if (record == nullptr || record->state != StorageState::kTagged || zeroed_while_loading_.count(data) != 0 ||
        !storages_.from_cpu_allocator(storage, storages_.original_deleter(record, storage)))
      return;
    storages_.set_state(*record, StorageState::kPlaceholder);
    record->site = std::move(site);
  }
  record_skip_stack(storage);
}

std::vector<SkipSite> Tracker::never_written() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (never_written_) return *never_written_;
  sweep_ended_locked();
  std::vector<SkipSite> result;
  storages_.for_each([&](const StorageRecord& record) {
    if (record.state == StorageState::kPlaceholder &&
        !any_page_resident(compat::data_ptr(*record.storage).get(), record.storage->nbytes()))
      result.push_back(*record.site);
  });
  in_order_made(result);
  stats_[Counter::storages_never_written] = result.size();
  never_written_ = result;
  return result;
}

}  // namespace fsdpskip
