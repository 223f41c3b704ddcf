// The loading phase and the collectives: what a broadcast, a send or a
// receive does to skipped storages (received: resolved; sent: replayed,
// or named where it cannot be), and training's first collective.
#include "tracker_detail.h"

namespace fsdpskip {
using namespace tracker_detail;

void Tracker::broadcast_started(const std::vector<at::Tensor>& tensors) {
  bool track_received = loading() || storages_.pending() != 0;
  if (!track_received) return;  // training's broadcasts (DDP's buffers): nothing left to resolve
  arriving(tensors);
  std::lock_guard<std::mutex> lock(mutex_);
  for (const at::Tensor& tensor : tensors)
    if (c10::StorageImpl* storage = storage_of(tensor); storage && storages_.find(storage) == nullptr)
      track_locked(storage, StorageState::kReceived);
  end_loading_locked(true);
}

void Tracker::coalesced_broadcast_started(const std::vector<at::Tensor>& tensors) {
  if (storages_.pending() == 0) return;
  // c10d flattens the tensors into buckets (reading them) before each
  // bucket's broadcast, then copies every one back out of it: they are
  // resolved now, and read as zeros for the flatten, whose bytes the
  // broadcast overwrites.
  arriving(tensors);
}

void Tracker::arriving(const std::vector<at::Tensor>& tensors) {
  if (storages_.pending() == 0) return;
  for (const at::Tensor& tensor : tensors) {
    c10::StorageImpl* storage = storage_of(tensor);
    if (storage == nullptr) continue;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      StorageRecord* record = find_pending_locked(storage);
      if (record == nullptr) continue;
      if (covers_storage(tensor, storage)) {
        resolve_locked(*record, false);
        continue;
      }
    }
    materialize(tensor, "a collective that writes a part of it");
  }
}

std::vector<Tracker::Unsendable> Tracker::sending(const std::vector<at::Tensor>& tensors) {
  if (!loading() && storages_.pending() == 0) return {};  // training's sends: nothing is skipped any more
  std::vector<c10::StorageImpl*> storages;
  for (const at::Tensor& tensor : tensors)
    if (c10::StorageImpl* storage = storage_of(tensor)) storages.push_back(storage);
  // Loading ends first: the generators pay what they owe, and the replays'
  // draws then go straight to torch (draw_slots.h).
  {
    std::lock_guard<std::mutex> lock(mutex_);
    end_loading_locked(true);
  }
  return replay_pending(storages);
}

std::vector<Tracker::Unsendable> Tracker::sending_raw(const void* buffer, size_t bytes) {
  if (!loading() && storages_.pending() == 0) return {};
  auto begin = reinterpret_cast<uintptr_t>(buffer), end = begin + bytes;
  std::vector<Unsendable> unsendable;
  std::lock_guard<std::mutex> lock(mutex_);
  sweep_ended_locked();
  storages_.for_each([&](StorageRecord& record) {
    auto data = reinterpret_cast<uintptr_t>(compat::data_ptr(*record.storage).get());
    if (!record.pending() || data >= end || data + record.storage->nbytes() <= begin) return;
    if (audit_.load()) materialized_locked(record);  // every init ran
    else unsendable.push_back({*record.site, "NCCL's C API sends it, and a replay cannot be ordered with NCCL's "
                                             "stream there"});
  });
  end_loading_locked(true);
  return unsendable;
}

void Tracker::materialized_locked(StorageRecord& record) {
  storages_.set_state(record, StorageState::kTagged);
  record.calls.clear();
  record.unreplayable = nullptr;
  ++stats_[Counter::storages_replayed];
}

std::vector<Tracker::Unsendable> Tracker::replay_pending(const std::vector<c10::StorageImpl*>& storages) {
  std::vector<void*> contexts;
  std::vector<Unsendable> unsendable;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    sweep_ended_locked();
    for (c10::StorageImpl* storage : storages) {
      StorageRecord* record = find_pending_locked(storage);
      if (record == nullptr) continue;
      if (audit_.load()) materialized_locked(*record);  // every init ran
      else if (record->unreplayable != nullptr) unsendable.push_back({*record->site, record->unreplayable});
      else contexts.push_back(record->context);
    }
  }
  for (void* context : contexts) materialize_context(context, "a send");
  return unsendable;
}

Tracker::TrainingStart Tracker::collective_started(size_t bytes) {
  if (bytes < kTrainingCollectiveBytes || training()) return {};
  std::lock_guard<std::mutex> lock(mutex_);
  if (training_.exchange(true)) return {};
  end_loading_locked(false);
  return {true, stats_.loading_ended};
}

void Tracker::end_loading_locked(bool by_rank0_data) {
  if (!tagged_any_.load() || !loading_.exchange(false)) return;
  if (by_rank0_data) stats_.loading_ended = true;
  zeroed_while_loading_.clear();  // nothing is tagged until the next loading phase
  generators_.settle_all();
  // Training's storages come and go by the thousand: the allocator that
  // gave loading's their own pages gives its place back.
  OwnedPages::instance().uninstall();
}

void Tracker::received(const void* buffer, size_t bytes) {
  if (!loading() && storages_.pending() == 0) return;  // training: nothing left to resolve
  auto begin = reinterpret_cast<uintptr_t>(buffer), end = begin + bytes;
  std::lock_guard<std::mutex> lock(mutex_);
  sweep_ended_locked();
  if (bytes != 0 && storages_.tracked() != 0)
    storages_.for_each([&](StorageRecord& record) {
      auto data = reinterpret_cast<uintptr_t>(compat::data_ptr(*record.storage).get());
      if (record.parameter() && data >= begin && data + record.storage->nbytes() <= end) resolve_locked(record, false);
    });
  end_loading_locked(true);
}

}  // namespace fsdpskip
