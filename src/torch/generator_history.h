// The CPU generators skipped calls drew from: where each run of skipped
// calls began (their replay starts there), and the draws they made that the
// generator has not been moved by yet.
//
// A skipped normal_ or uniform_ moves its generator's place within its 624
// words at once, and owes the rest: the whole regenerations its draws span.
// What a generator owes is paid in one step (mt19937_jump.h) before
// anything reads or draws from it that fsdpskip sees: a normal_ or uniform_
// that runs, torch.get_rng_state() (CPUGeneratorImpl::get_state), the end of
// loading. A reseed or a set state (set_current_seed, seed, set_state) makes
// the debt moot. So the generator's state is the one it would have had
// without fsdpskip wherever it can be read, and every draw (randperm,
// random_, bernoulli_: CPUGeneratorImpl::random and random64, rows of the
// hook table) pays first.
//
// Thread-safe, by a lock of its own, taken after a generator's (torch's rule:
// whoever reads or moves a generator's engine holds generator->mutex_) and
// the tracker's, never before them.
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <ATen/core/MT19937RNGEngine.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "replay.h"

namespace fsdpskip {

// A CPU generator's state, told by its place and the words at both ends:
// any draw moves the place, a whole number of regenerations rewrites every
// word, and a reseed changes the seed.
struct GeneratorFingerprint {
  uint64_t seed;
  int left;
  uint32_t next, first, last;
  explicit GeneratorFingerprint(const at::mt19937_data_pod& state = {})
      : seed(state.seed_), left(state.left_), next(state.next_), first(state.state_.front()),
        last(state.state_.back()) {}
  bool operator==(const GeneratorFingerprint& other) const {
    return seed == other.seed && left == other.left && next == other.next && first == other.first &&
           last == other.last;
  }
};

class GeneratorHistory {
 public:
  // Before record(): makes sure a fresh snapshot and an entry's room are at
  // hand, so that record() allocates nothing. Throws what an allocation throws.
  void reserve();
  // A skipped call's `draws` from `generator` (a CPU generator; takes its
  // lock): fills in where the call stood (the run's snapshot and the call's
  // offset in it), moves the generator's place and owes its regenerations.
  // Something else moved the generator since the last skipped call (a draw
  // not seen): what it owed is paid first, and a new run begins.
  void record(const at::Generator& generator, uint64_t draws, SkippedCall& call);
  // Pays what `generator` owes. holds_lock: the caller holds its mutex_.
  void settle(c10::GeneratorImpl* generator, bool holds_lock);
  // Pays what every generator owes (the end of loading).
  void settle_all();
  // `generator` is reseeded or given a state (its caller holds its mutex_):
  // what it owed is dropped.
  void forget(c10::GeneratorImpl* generator);
  // True while some generator owes regenerations: the one test the hot paths make.
  bool owing() const { return owing_.load(std::memory_order_relaxed) != 0; }
  // Which generators owe, for the preload's draw forwarders to read
  // (plugin_abi.h's owing_generators): rewritten whenever a debt begins or
  // ends, into `slots` (FSDPSKIP_OWING_WORDS words) once given, before any
  // debt; into words of its own until then (unit tests). `watch_draws`
  // (fsdpskip_host's, or nullptr) is told when the first debt begins and
  // when the last ends.
  void publish_owing_to(void** slots, void (*watch_draws)(bool));
  void* const* owing_slots() { return owing_slots_; }
  // The regenerations `generator` owes (tests).
  uint64_t owed(c10::GeneratorImpl* generator);
  // fork(): the child must not inherit the lock held by a thread it lacks.
  std::mutex& mutex() { return mutex_; }

 private:
  struct Entry {
    c10::weak_intrusive_ptr<c10::GeneratorImpl> generator;
    std::shared_ptr<GeneratorSnapshot> snapshot;
    uint64_t offset;                // outputs drawn past the snapshot's start
    uint64_t owed;                  // regenerations not yet made
    GeneratorFingerprint expected;  // the state after the last skipped call or payment
    int slot;                       // its owing_slots_ index while it owes; -1: counted in owing_beyond_slots_
  };
  Entry* find_locked(c10::GeneratorImpl* generator);
  void erase_locked(Entry* entry);
  // A debt begins or ends: the entry's generator gets a slot of its own in
  // owing_slots_ (or, all taken, the last slot reads ANY) or gives it up.
  // Each happens under the generator's own mutex, which a draw holds too,
  // and no other generator's slot moves: a draw never misses a debt.
  void owes_locked(Entry& entry, c10::GeneratorImpl* generator);
  void paid_locked(Entry& entry);
  // The word after the slots: the one generator that owes, ANY when
  // several do (the slots say which), NULL when none does. A draw from a
  // generator that owes nothing, while another owes (a replay's own
  // generator, while the default one owes), costs the forwarder one
  // comparison. Rewritten after every slot, so a draw holding its
  // generator's mutex sees its own debt either here or in its slot.
  void summarize_locked();
  // Pays `entry`'s debt into `cpu`, whose lock the caller holds.
  void settle_locked(at::CPUGeneratorImpl* cpu, Entry& entry);

  std::mutex mutex_;
  std::vector<Entry> entries_;
  std::shared_ptr<GeneratorSnapshot> spare_;
  std::atomic<size_t> owing_{0};  // entries whose owed is not 0
  // Written with release stores, under mutex_. The last one is ANY while
  // owing_beyond_slots_ generators owe without a slot.
  void* own_slots_[FSDPSKIP_OWING_WORDS] = {};
  void** owing_slots_ = own_slots_;
  size_t owing_beyond_slots_ = 0;
  void (*watch_draws_)(bool) = nullptr;
  bool draws_watched_ = true;  // as the dynamic linker bound them
};

}  // namespace fsdpskip
