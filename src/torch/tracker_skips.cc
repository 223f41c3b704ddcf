// Skipping: a skipped call's bookkeeping (its generator's advance, its
// record for a replay, the storage's release of pages), lazy zeros, audits,
// skip sites and copies.
#include "tracker_detail.h"

namespace fsdpskip {
using namespace tracker_detail;

bool Tracker::skipped(fsdpskip_kernel kernel, const at::Tensor& self, const compat::GeneratorArgument* generator,
                      const fsdpskip_call_arguments* arguments) {
  // The generator, the draws and the call's description first: they may
  // throw (another device's generator, torch's own error, an allocation),
  // and then nothing is committed and the kernel runs on self.
  std::optional<at::Generator> drawn_from;
  uint64_t draws = 0;
  if (generator != nullptr && is_random(kernel)) {
    draws = random_draws(kernel, self).value_or(0);  // decide_init ran only a call it could count
    drawn_from = cpu_generator(*generator);
  }
  try {
    const char* unreplayable = nullptr;
    SkippedCall call = describe_call(kernel, self, arguments, &unreplayable);
    const at::Tensor* copy_source =
        kernel == FSDPSKIP_COPY && arguments ? static_cast<const at::Tensor*>(arguments->value) : nullptr;
    if (!skip_storage(kernel, self, std::move(call), unreplayable, copy_source, drawn_from, draws)) return false;
  } catch (const std::exception&) {
    // The kernel runs on self after all: its generator pays what it owes first.
    if (drawn_from) generators_.settle(drawn_from->unsafeGetGeneratorImpl(), false);
    throw;
  }
  return true;
}

void Tracker::generator_touched(c10::GeneratorImpl* generator, bool reads) {
  // A replay draws from a fresh generator of its own, which owes nothing:
  // its kernel's every draw comes here, and must not take the history's lock.
  if (running_own_kernels()) return;
  if (reads) generators_.settle(generator, true);
  else generators_.forget(generator);
}

const char* Tracker::describe_copy_source_locked(const at::Tensor& src, SkippedCall& call) {
  c10::StorageImpl* source = storage_of(src);
  StorageRecord* record = source ? find_pending_locked(source) : nullptr;
  if (record == nullptr)
    return "a copy_ whose source was no longer a skipped storage is not replayed";
  if (record->unreplayable != nullptr) return record->unreplayable;
  call.source = std::make_shared<const CopySource>(CopySource{record->calls, source->nbytes(), geometry_of(src)});
  return nullptr;
}

bool Tracker::skip_storage(fsdpskip_kernel kernel, const at::Tensor& self, SkippedCall call, const char* unreplayable,
                           const at::Tensor* copy_source, const std::optional<at::Generator>& generator,
                           uint64_t draws) {
  c10::StorageImpl* storage = storage_of(self);
  if (storage == nullptr) return false;
  bool first = false, guarded = false;
  {
    // The call is committed and the pages guarded as one step against a
    // materialization on another thread, which would otherwise finish
    // between them and have its values released.
    std::lock_guard<std::mutex> one_at_a_time(materializing_);
    void* context = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      StorageRecord* record = storages_.find(storage);
      // Its record went between the verdict and now (the policy changed on
      // another thread): the kernel runs after all.
      if (record == nullptr || !record->parameter() || !storages_.owned(*record)) return false;
      if (copy_source != nullptr && unreplayable == nullptr)
        unreplayable = describe_copy_source_locked(*copy_source, call);
      // A call that cannot be replayed is not skipped: the kernel runs (on
      // a pending storage, materialized first by the fault it takes).
      if (unreplayable != nullptr) return false;
      bool whole = covers_storage(self, record->storage);
      bool step = fsdpskip_role_of(kernel) == FSDPSKIP_ROLE_STEP;
      // A step reads what its storage's calls made: it was materialized
      // meanwhile (another thread), so the step runs on its values.
      if (step && !record->pending()) return false;
      // A pending storage's values are its calls replayed over zeros. A
      // first skip that writes a part of the storage keeps that true only
      // when nothing else was written there (no page of it in memory).
      if (!record->pending() && !whole && any_page_resident(compat::data_ptr(*storage).get(), storage->nbytes()))
        return false;
      // An init that writes the whole storage makes every earlier call
      // moot: a storage re-initialised in a loop keeps one call.
      if (whole && !step) record->calls.clear();
      if (record->calls.size() == record->calls.capacity())
        record->calls.reserve(std::max<size_t>(2, 2 * record->calls.size()));
      if (generator) generators_.reserve();
      first = mark_skipped_locked(*record, kernel, self);
      if (generator) generators_.record(*generator, draws, call);
      record->calls.push_back(std::move(call));
      context = record->context;
      ++stats_.calls[kernel];
    }
    // Its values are its recipe now; its pages are released and guarded, so
    // that anything that touches them has it materialized first.
    guarded = OwnedPages::instance().guard(context);
  }
  // Where the kernel refused the guard (the map count), it is materialized at once.
  if (!guarded) materialize(self, "a guard the kernel refused (vm.max_map_count)");
  if (first) record_skip_stack(storage);
  if (first && guarded) {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_[Counter::bytes_never_committed] += storage->nbytes();
    log(FSDPSKIP_MESSAGE_DEBUG, "skipped init of", storage);
  }
  return true;
}

void Tracker::zero_lazily(const at::Tensor& self) {
  char* begin;
  size_t bytes;
  if (!contiguous_range(self, &begin, &bytes)) return;  // decide_init checked it: cannot happen
  // The CPU allocator's memory (decide_init checked): private anonymous pages.
  bool loading_now = loading();
  Zeroed zeroed = zero_range(begin, bytes, true);
  std::lock_guard<std::mutex> lock(mutex_);
  // Written, although its pages are not in memory: not a placeholder,
  // whether tagged already or later (zeros_like, then nn.Parameter).
  c10::StorageImpl* storage = storage_of(self);
  if (storages_.tracked() != 0)
    if (StorageRecord* record = storages_.find(storage); record && record->state == StorageState::kPlaceholder)
      storages_.set_state(*record, StorageState::kTagged);
  if (loading_now) zeroed_while_loading_.insert(compat::data_ptr(*storage).get());
  ++stats_[Counter::lazy_zero_calls];
  if (loading_now) stats_[Counter::lazy_zero_bytes_never_committed] += zeroed.released;
}

void Tracker::audited(fsdpskip_kernel kernel, const at::Tensor& self, uint64_t nanoseconds) {
  c10::StorageImpl* storage = storage_of(self);
  if (storage == nullptr) return;
  if (kernel == FSDPSKIP_COPY) tag(storage);
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.calls[kernel];
    stats_[Counter::audited_kernel_ns] += nanoseconds;
    if (StorageRecord* record = storages_.find(storage); record && record->parameter())
      first = mark_skipped_locked(*record, kernel, self);
  }
  if (first) record_skip_stack(storage);
}

void Tracker::record_skip_stack(c10::StorageImpl* storage) {
  // A forked child never reports; and its unwinder could wait on the linker's
  // lock, copied as held if a parent thread was unwinding at the fork.
  if (forked_child_) return;
  try {
    SkipStack stack = capture_skip_stack(stacks_.load());
    std::lock_guard<std::mutex> lock(mutex_);
    // Resolved or freed meanwhile (another thread): its site no longer matters.
    if (StorageRecord* record = storages_.find(storage); record && record->site) record->site->stack = std::move(stack);
  } catch (const std::exception&) {
    // The skip is recorded already: its site goes without a stack.
  }
}

void Tracker::copied(const at::Tensor& dst, const at::Tensor& src) {
  (void)src;
  if (storages_.tracked() == 0) return;
  c10::StorageImpl* destination = storage_of(dst);
  if (destination == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  // Written: a copy of anything. (decide_copy resolved or materialized a
  // pending destination before the copy ran.)
  if (StorageRecord* record = storages_.find(destination); record && record->state == StorageState::kPlaceholder)
    storages_.set_state(*record, StorageState::kTagged);
}

}  // namespace fsdpskip
