// The loading phase and the collectives: what a broadcast, a send or a
// receive does to skipped storages (received: resolved; sent: replayed,
// or named where it cannot be), and training's first collective.
#include "tracker_detail.h"

namespace fsdpskip {
using namespace tracker_detail;

void Tracker::broadcast_started(const std::vector<at::Tensor>& tensors) {
  bool track_received = loading() || pending_.load() != 0;
  if (!track_received) return;  // training's broadcasts (DDP's buffers): nothing left to resolve
  {
    std::lock_guard<std::mutex> lock(mutex_);
    sweep_ended_locked();
    for (const at::Tensor& tensor : tensors) {
      c10::StorageImpl* storage = storage_of(tensor);
      if (storage == nullptr) continue;
      if (Record* record = find_locked(storage)) resolve_locked(*record, false);
      else track_locked(storage, Role::kReceived);
    }
    end_loading_locked(true);
  }
}

std::vector<Tracker::Unsendable> Tracker::sending(const std::vector<at::Tensor>& tensors) {
  if (!loading() && pending_.load() == 0) return {};  // training's sends: nothing is skipped any more
  std::vector<c10::StorageImpl*> storages;
  for (const at::Tensor& tensor : tensors)
    if (c10::StorageImpl* storage = storage_of(tensor)) storages.push_back(storage);
  std::vector<Unsendable> unsendable = replay_pending(storages);
  std::lock_guard<std::mutex> lock(mutex_);
  end_loading_locked(true);
  return unsendable;
}

std::vector<Tracker::Unsendable> Tracker::sending_raw(const void* buffer, size_t bytes) {
  if (!loading() && pending_.load() == 0) return {};
  auto begin = reinterpret_cast<uintptr_t>(buffer), end = begin + bytes;
  std::vector<Unsendable> unsendable;
  std::lock_guard<std::mutex> lock(mutex_);
  sweep_ended_locked();
  for (auto& entry : records_) {
    Record& record = entry.second;
    auto data = reinterpret_cast<uintptr_t>(compat::data_ptr(*record.storage).get());
    if (record.role != Role::kParameter || !record.skipped || data >= end || data + record.storage->nbytes() <= begin)
      continue;
    if (audit_.load()) sent_locked(record);  // every init ran
    else unsendable.push_back({*record.site, "NCCL's C API sends it, and a replay cannot be ordered with NCCL's "
                                             "stream there"});
  }
  end_loading_locked(true);
  return unsendable;
}

void Tracker::sent_locked(Record& record) {
  record.skipped = false;
  record.placeholder = false;
  record.calls.clear();
  record.unreplayable = nullptr;
  set_zeros_locked(record, false);
  pending_.fetch_sub(1);
  ++stats_[Counter::storages_replayed];
}

std::vector<Tracker::Unsendable> Tracker::replay_pending(const std::vector<c10::StorageImpl*>& storages) {
  struct Replay {
    c10::intrusive_ptr<c10::StorageImpl> storage;  // held while it is written
    SkippedCalls calls;
    bool released;  // its whole pages were handed back when it was skipped
  };
  std::vector<Replay> replays;
  std::vector<Unsendable> unsendable;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    sweep_ended_locked();
    for (c10::StorageImpl* storage : storages) {
      Record* record = find_locked(storage);
      if (record == nullptr || record->role != Role::kParameter || !record->skipped) continue;
      if (audit_.load()) sent_locked(*record);  // every init ran
      else if (record->unreplayable != nullptr) unsendable.push_back({*record->site, record->unreplayable});
      else
        replays.push_back({c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(storage), record->calls,
                           from_cpu_allocator(storage, original_deleter(record, storage))});
    }
  }
  for (Replay& replay_of : replays) {
    c10::StorageImpl* storage = replay_of.storage.get();
    std::string why;
    // A page of it in memory that its skip released: something fsdpskip
    // does not see touched it since (cat(out=), index_put_, numpy), and a
    // replay could write over what it wrote.
    if (replay_of.released && any_page_resident(compat::data_ptr(*storage).get(), storage->nbytes())) {
      why = "memory of it was touched since its init was skipped by something fsdpskip does not see (cat(out=), "
            "index_put_, numpy), so a replay could lose a write";
    } else {
      try {
        replay(storage, replay_of.calls);
      } catch (const std::exception& error) {
        why = std::string("its replay failed: ") + error.what();
      }
    }
    std::lock_guard<std::mutex> lock(mutex_);
    Record* record = find_locked(storage);
    if (record == nullptr || record->role != Role::kParameter || !record->skipped) continue;
    if (why.empty()) sent_locked(*record);
    else unsendable.push_back({*record->site, why});
  }
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
  // Comparisons are answered from known zeros only while loading: a write
  // fsdpskip does not see (index_put_, numpy) cannot mislead a later phase.
  if (zeros_known_.load() != 0)
    for (auto& entry : records_) set_zeros_locked(entry.second, false);
}

void Tracker::received(const void* buffer, size_t bytes) {
  if (!loading() && pending_.load() == 0) return;  // training: nothing left to resolve
  auto begin = reinterpret_cast<uintptr_t>(buffer), end = begin + bytes;
  std::lock_guard<std::mutex> lock(mutex_);
  sweep_ended_locked();
  if (bytes != 0 && tracked_.load() != 0)
    for (auto& entry : records_) {
      Record& record = entry.second;
      auto data = reinterpret_cast<uintptr_t>(compat::data_ptr(*record.storage).get());
      if (record.role == Role::kParameter && data >= begin && data + record.storage->nbytes() <= end)
        resolve_locked(record, false);
    }
  end_loading_locked(true);
}

}  // namespace fsdpskip
