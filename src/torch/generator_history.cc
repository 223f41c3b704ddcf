#include "generator_history.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>

#include "mt19937_jump.h"
#include "random_draws.h"

namespace fsdpskip {

void GeneratorHistory::reserve() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!spare_) spare_ = std::make_shared<GeneratorSnapshot>();
  if (entries_.size() == entries_.capacity()) entries_.reserve(entries_.size() + 4);
}

GeneratorHistory::Entry* GeneratorHistory::find_locked(c10::GeneratorImpl* generator) {
  for (size_t i = 0; i < entries_.size();) {
    if (entries_[i].generator.expired()) {  // its generator ended: nothing is owed to anyone
      erase_locked(&entries_[i]);
      continue;
    }
    if (entries_[i].generator.lock().get() == generator) return &entries_[i];
    ++i;
  }
  return nullptr;
}

void GeneratorHistory::erase_locked(Entry* entry) {
  if (entry->owed != 0) paid_locked(*entry);
  *entry = std::move(entries_.back());
  entries_.pop_back();
}

void GeneratorHistory::publish_owing_to(void** slots, void (*watch_draws)(bool)) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (int i = 0; i < FSDPSKIP_OWING_WORDS; ++i) __atomic_store_n(&slots[i], owing_slots_[i], __ATOMIC_RELEASE);
  owing_slots_ = slots;
  watch_draws_ = watch_draws;
  summarize_locked();
}

void GeneratorHistory::owes_locked(Entry& entry, c10::GeneratorImpl* generator) {
  owing_.fetch_add(1, std::memory_order_relaxed);
  entry.slot = -1;
  for (int i = 0; i + 1 < FSDPSKIP_OWING_SLOTS && entry.slot < 0; ++i)
    if (owing_slots_[i] == nullptr) entry.slot = i;
  if (entry.slot >= 0) {
    __atomic_store_n(&owing_slots_[entry.slot], static_cast<void*>(generator), __ATOMIC_RELEASE);
  } else if (owing_beyond_slots_++ == 0) {
    __atomic_store_n(&owing_slots_[FSDPSKIP_OWING_SLOTS - 1], FSDPSKIP_OWING_ANY, __ATOMIC_RELEASE);
  }
  summarize_locked();
}

void GeneratorHistory::paid_locked(Entry& entry) {
  owing_.fetch_sub(1, std::memory_order_relaxed);
  if (entry.slot >= 0) {
    __atomic_store_n(&owing_slots_[entry.slot], static_cast<void*>(nullptr), __ATOMIC_RELEASE);
  } else if (--owing_beyond_slots_ == 0) {
    __atomic_store_n(&owing_slots_[FSDPSKIP_OWING_SLOTS - 1], static_cast<void*>(nullptr), __ATOMIC_RELEASE);
  }
  summarize_locked();
}

void GeneratorHistory::summarize_locked() {
  void* summary = nullptr;
  if (owing() && (owing_.load(std::memory_order_relaxed) != 1 || owing_beyond_slots_ != 0)) {
    summary = FSDPSKIP_OWING_ANY;
  } else if (owing()) {
    for (int i = 0; i + 1 < FSDPSKIP_OWING_SLOTS; ++i)
      if (owing_slots_[i] != nullptr) summary = owing_slots_[i];
  }
  // Torch's draws pass the forwarders before the word says a debt began,
  // and go around them only once it says none is left.
  if (summary != nullptr && watch_draws_ != nullptr && !draws_watched_) watch_draws_(draws_watched_ = true);
  __atomic_store_n(&owing_slots_[FSDPSKIP_OWING_SLOTS], summary, __ATOMIC_RELEASE);
  if (summary == nullptr && watch_draws_ != nullptr && draws_watched_) watch_draws_(draws_watched_ = false);
}

void GeneratorHistory::settle_locked(at::CPUGeneratorImpl* cpu, Entry& entry) {
  at::mt19937_data_pod state = cpu->engine().data();
  bool moved = !(entry.expected == GeneratorFingerprint(state));
  if (entry.owed != 0) {
    // Draws not seen since took their places from the earlier words; the
    // place after them is the same either way.
    regenerate_times(state.state_.data(), entry.owed);
    set_engine_state(cpu, state);
    entry.owed = 0;
    paid_locked(entry);
  }
  entry.expected = GeneratorFingerprint(state);
  // Moved by draws not seen: the run's offsets no longer add up to its place.
  if (moved) erase_locked(&entry);
}

void GeneratorHistory::record(const at::Generator& generator, uint64_t draws, SkippedCall& call) {
  auto* cpu = at::check_generator<at::CPUGeneratorImpl>(generator);
  std::lock_guard<std::mutex> generator_lock(cpu->mutex_);
  std::lock_guard<std::mutex> lock(mutex_);
  Entry* entry = find_locked(cpu);
  if (entry != nullptr && !(entry->expected == GeneratorFingerprint(cpu->engine().data()))) {
    settle_locked(cpu, *entry);  // and the run ends
    entry = nullptr;
  }
  at::mt19937_data_pod state = cpu->engine().data();
  if (entry == nullptr) {
    // A new run of calls; reserve() made the snapshot and the entry's room.
    std::shared_ptr<GeneratorSnapshot> snapshot = std::move(spare_);
    snapshot->start = snapshot->cursor = state;
    snapshot->cursor_draws = 0;
    entry = &entries_.emplace_back(Entry{c10::weak_intrusive_ptr<c10::GeneratorImpl>(generator.getIntrusivePtr()),
                                         std::move(snapshot), 0, 0, GeneratorFingerprint(), -1});
  }
  call.snapshot = entry->snapshot;
  call.offset = entry->offset;
  entry->offset += draws;
  uint64_t regenerations = move_place(state, draws);
  if (regenerations != 0 && entry->owed == 0) owes_locked(*entry, cpu);
  entry->owed += regenerations;
  set_engine_state(cpu, state);
  entry->expected = GeneratorFingerprint(state);
}

void GeneratorHistory::settle(c10::GeneratorImpl* generator, bool holds_lock) {
  if (!owing()) return;
  std::unique_lock<std::mutex> generator_lock(generator->mutex_, std::defer_lock);
  if (!holds_lock) generator_lock.lock();
  std::lock_guard<std::mutex> lock(mutex_);
  // Only CPU generators are recorded.
  if (Entry* entry = find_locked(generator); entry && entry->owed != 0)
    settle_locked(static_cast<at::CPUGeneratorImpl*>(generator), *entry);
}

void GeneratorHistory::settle_all() {
  if (!owing()) return;
  std::vector<c10::intrusive_ptr<c10::GeneratorImpl>> owing;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (Entry& entry : entries_)
      if (entry.owed != 0)
        if (auto held = entry.generator.lock()) owing.push_back(std::move(held));
  }
  for (auto& generator : owing) settle(generator.get(), false);
}

void GeneratorHistory::forget(c10::GeneratorImpl* generator) {
  if (!owing()) return;  // a run that owes nothing may go on: its place is the state's
  std::lock_guard<std::mutex> lock(mutex_);
  if (Entry* entry = find_locked(generator)) erase_locked(entry);
}

uint64_t GeneratorHistory::owed(c10::GeneratorImpl* generator) {
  std::lock_guard<std::mutex> lock(mutex_);
  Entry* entry = find_locked(generator);
  return entry ? entry->owed : 0;
}

}  // namespace fsdpskip
