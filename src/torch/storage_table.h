// The storages fsdpskip tracks, each in one state of its life, from the
// moment it matters until its memory is freed. What moves a storage:
//   untracked → tagged             made a parameter while loading (requires_grad_,
//                                  `.data =`, an init of a leaf tensor)
//   untracked → received           written by a broadcast from another rank
//   tagged → placeholder           no page of it in memory yet (torch.empty)
//   placeholder → tagged           written (a copy, a lazy zero)
//   tagged, placeholder → pending  an init skipped: its values are its recipe
//   pending → tagged               materialized (its recipe replayed) before
//                                  anything touched it or sent it
//   any → received                 another rank's data overwrote all of it:
//                                  a pending storage keeps its saving
//   any → forgotten                its storage ended (a pending one is
//                                  resolved by its free)
//
// The CPU allocator's storages have their DataPtr's deleter swapped for
// tracked_deleter, which forgets the record and calls the original: the
// record dies exactly with its storage. Any other allocator's deleter is left
// alone (the CUDA caching allocator recognises its blocks by their deleter:
// a swapped one would silently turn record_stream off, letting a block be
// reused while NCCL's stream still reads it); those storages are watched
// through a weak reference instead, which keeps their StorageImpl's address
// from being reused and tells, at the next lookup or sweep, that they ended.
// Either way a later storage at the same address is a stranger.
//
// Not thread-safe: its owner (the tracker) holds its lock around every call,
// except the counts, which may be read without it.
#pragma once

#include <c10/core/StorageImpl.h>
#include <c10/util/intrusive_ptr.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "compat.h"
#include "replay.h"
#include "skip_stack.h"

namespace fsdpskip {

enum class StorageState : uint8_t {
  kTagged,       // a parameter's storage: its inits may be skipped while loading
  kPlaceholder,  // tagged with no page in memory, and nothing written since (Tracker::never_written)
  kPending,      // skipped: its values are its recipe (`calls`)
  kReceived,     // written by another rank's data: never tagged or skipped again
};

// Where and what a skipped storage or a placeholder was, captured when it
// became one, so the exit report needs no torch call.
struct SkipSite {
  std::string shape, dtype, device;
  size_t bytes = 0;
  uint64_t order = 0;  // when it was made: lists of sites read in the job's order
  fsdpskip_kernel first_kernel = FSDPSKIP_NORMAL;
  SkipStack stack;
};

struct StorageRecord {
  void* context;  // its DataPtr's, the table's key (an OwnedPages mapping's, when it has one)
  c10::StorageImpl* storage;
  c10::DeleterFnPtr original_deleter;  // swapped: the deleter to call at the free
  std::optional<c10::weak_intrusive_ptr<c10::StorageImpl>> watched;  // not swapped
  StorageState state;
  std::unique_ptr<SkipSite> site;  // a pending storage's or a placeholder's
  c10::DataPtr adopted_from;       // its memory before OwnedPages::adopt, freed with it
  // What it skipped since it was last given values, in order, for its
  // replay; or why its skipped values cannot be given back.
  SkippedCalls calls;
  const char* unreplayable = nullptr;

  bool parameter() const { return state != StorageState::kReceived; }
  bool pending() const { return state == StorageState::kPending; }
};

class StorageTable {
 public:
  // The CPU allocator's own deleter, read once a sample allocation is made.
  void set_cpu_deleter(c10::DeleterFnPtr deleter) { cpu_deleter_ = deleter; }
  // Memory of the CPU allocator (or of OwnedPages, which stands in for it):
  // private anonymous pages, whose deleter may be swapped.
  bool from_cpu_allocator(const c10::StorageImpl* storage, c10::DeleterFnPtr deleter) const;

  // The live record of `storage`; nullptr for a stranger or one that ended.
  StorageRecord* find(const c10::StorageImpl* storage);
  // The record of a DataPtr context, live or not yet swept.
  StorageRecord* find_context(void* context);
  // Starts tracking `storage` in `state`. nullptr when it cannot be (no
  // deleter or context of its own, already tracked, or its deleter changed
  // meanwhile). `ended` gets a watched record that ended and whose address
  // the storage now has, before it is forgotten.
  template <typename Ended>
  StorageRecord* track(c10::StorageImpl* storage, StorageState state, Ended&& ended);
  // The storage's deleter, as it was before tracking.
  c10::DeleterFnPtr original_deleter(const StorageRecord* record, const c10::StorageImpl* storage) const;
  // True when a record's memory is a CPU mapping of OwnedPages': only those are skipped.
  bool owned(const StorageRecord& record) const;

  // Moves a record to `state`, keeping the pending count.
  void set_state(StorageRecord& record, StorageState state);
  // Forgets a record (its storage ended, or its deleter ran).
  void erase(void* context);
  // Each watched record whose storage ended: `ended(record)`, then forgotten.
  template <typename Ended>
  void sweep(Ended&& ended);
  template <typename Visit>
  void for_each(Visit&& visit) {
    for (auto& entry : records_) visit(entry.second);
  }

  size_t tracked() const { return tracked_.load(std::memory_order_relaxed); }
  size_t pending() const { return pending_.load(std::memory_order_relaxed); }

 private:
  std::unordered_map<void*, StorageRecord> records_;  // by DataPtr context
  std::atomic<size_t> tracked_{0};
  std::atomic<size_t> pending_{0};
  size_t watched_ = 0;  // records of other allocators': the only ones a sweep can find ended
  c10::DeleterFnPtr cpu_deleter_ = nullptr;
};

// Installed as the deleter of every tracked storage of the CPU allocator's.
void tracked_deleter(void* context);

template <typename Ended>
StorageRecord* StorageTable::track(c10::StorageImpl* storage, StorageState state, Ended&& ended) {
  c10::DataPtr& data_ptr = compat::data_ptr(*storage);
  void* context = data_ptr.get_context();
  c10::DeleterFnPtr deleter = data_ptr.get_deleter();
  // Without a deleter and a context of its own, a storage's end cannot be
  // observed, so it is never tracked (and never skipped).
  if (context == nullptr || deleter == nullptr || deleter == &tracked_deleter) return nullptr;
  auto existing = records_.find(context);
  if (existing != records_.end()) {
    if (!existing->second.watched || !existing->second.watched->expired()) return nullptr;
    ended(existing->second);  // a watched storage ended; a stranger has its address
    erase(context);
  }
  bool swap = from_cpu_allocator(storage, deleter);
  // What may fail (the allocations) comes before the deleter is swapped: a
  // failure leaves the storage as it was.
  auto entry = records_.try_emplace(context).first;
  StorageRecord& record = entry->second;
  record = StorageRecord{context, storage, swap ? deleter : nullptr, std::nullopt, StorageState::kTagged, {}, {}, {},
                         nullptr};
  if (!swap) {
    record.watched.emplace(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(storage));
    ++watched_;
  } else if (!data_ptr.compare_exchange_deleter(deleter, &tracked_deleter)) {
    records_.erase(entry);
    return nullptr;
  }
  tracked_.fetch_add(1);
  set_state(record, state);
  return &record;
}

template <typename Ended>
void StorageTable::sweep(Ended&& ended) {
  if (watched_ == 0) return;  // the CPU allocator's records end through tracked_deleter
  for (auto it = records_.begin(); it != records_.end();) {
    auto next = std::next(it);
    if (it->second.watched && it->second.watched->expired()) {
      ended(it->second);
      erase(it->first);
    }
    it = next;
  }
}

}  // namespace fsdpskip
