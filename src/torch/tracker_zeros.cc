// Known zeros: storages known to hold zeros (skipped, or a mask answered on
// them), and comparisons answered from them without committing pages.
#include "tracker_detail.h"

namespace fsdpskip {
using namespace tracker_detail;

void Tracker::set_zeros_locked(Record& record, bool zeros) {
  if (record.zeros != zeros) zeros_known_.fetch_add(zeros ? 1 : -1);
  record.zeros = zeros;
}

bool Tracker::holds_zeros(const at::Tensor& tensor) {
  c10::StorageImpl* storage = storage_of(tensor);
  if (storage == nullptr || !tensor.device().is_cpu()) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  Record* record = find_locked(storage);
  return record != nullptr && record->zeros;
}

fsdpskip_verdict Tracker::decide_on_zeros(fsdpskip_kernel kernel, const at::Tensor& self, const void* other,
                                          const at::Tensor& out) {
  if (zeros_known_.load() == 0 || audit_.load() || !enabled() || !loading() || !out.device().is_cpu() ||
      !holds_zeros(self))
    return writes(out, FSDPSKIP_RUN);
  bool zeros = false;
  if (kernel == FSDPSKIP_OR) {
    zeros = holds_zeros(*static_cast<const at::Tensor*>(other));
  } else if (kernel == FSDPSKIP_ANY) {
    zeros = true;
    note_unreproduced();
  } else {
    // What follows a comparison of skipped values (trunc_normal_'s redraws)
    // depends on the values: the storage's calls no longer tell them.
    if (c10::StorageImpl* storage = storage_of(self)) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (Record* record = find_locked(storage))
        mark_unreplayable_locked(*record, "its skipped values were compared (trunc_normal_'s rejection sampling, "
                                          "torch 2.12 and later), which a replay cannot reproduce");
    }
    // `0 op scalar` computed by torch itself on one element of self's dtype:
    // its promotion rules, NaN and all. A dtype torch refuses (complex): the
    // kernel runs and raises its own error.
    try {
      const c10::Scalar& scalar = *static_cast<const c10::Scalar*>(other);
      OwnKernels own;  // the sample's zeros are an ordinary zero_
      at::Tensor sample = at::zeros({1}, self.options());
      at::Tensor answer = kernel == FSDPSKIP_LT   ? at::lt(sample, scalar)
                          : kernel == FSDPSKIP_LE ? at::le(sample, scalar)
                          : kernel == FSDPSKIP_GT ? at::gt(sample, scalar)
                                                  : at::ge(sample, scalar);
      zeros = !answer.item<bool>();
    } catch (const std::exception&) {
      zeros = false;
    }
  }
  return writes(out, traced(kernel, out, zeros ? FSDPSKIP_ZEROS : FSDPSKIP_RUN));
}

void Tracker::note_unreproduced() {
  c10::intrusive_ptr<c10::GeneratorImpl> generator;
  if (t_last_advanced) generator = t_last_advanced->lock();
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_[Counter::draws_unreproduced];
  if (!generator) return;
  for (const Unreproduced& known : unreproduced_)
    if (known.generator.lock() == generator) return;
  unreproduced_.push_back({c10::weak_intrusive_ptr<c10::GeneratorImpl>(generator), generator->current_seed()});
  unreproduced_count_.fetch_add(1);
  if (say_ != nullptr && log_level_ >= FSDPSKIP_LOG_DEBUG)
    say_(FSDPSKIP_MESSAGE_DEBUG, "any() answered on skipped values after a skipped random init (trunc_normal_'s "
                                 "rejection test): that generator's later draws differ from a run without fsdpskip");
}

void Tracker::zeros_produced(fsdpskip_kernel kernel, const at::Tensor& out) {
  c10::StorageImpl* storage = storage_of(out);
  if (storage == nullptr) return;
  c10::DeleterFnPtr deleter;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    deleter = original_deleter(find_locked(storage), storage);
  }
  char* begin;
  size_t bytes = 0;
  bool anonymous = from_cpu_allocator(storage, deleter);
  bool range = contiguous_range(out, &begin, &bytes);
  Zeroed zeroed;
  if (range && anonymous && bytes >= lazy_zero_threshold()) {
    zeroed = zero_range(begin, bytes, true);
  } else {
    zero_tensor(out);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  // The whole storage holds zeros now: a later comparison, `|` or any() of
  // it is answered in turn.
  if (range && anonymous && out.storage_offset() == 0 && bytes == storage->nbytes()) {
    Record* record = find_locked(storage);
    if (record == nullptr) record = track_locked(storage, Role::kDerived);  // may fail: then the kernel runs
    if (record != nullptr && record->role != Role::kParameter) set_zeros_locked(*record, loading());
  }
  ++stats_.calls[kernel];
  stats_[Counter::answered_bytes_never_committed] += zeroed.released;
}

}  // namespace fsdpskip
