// Verdicts: whether an init, fill or copy of a tagged storage runs, is
// skipped, audited or zeroed lazily, as the trace log tells it.
#include "tracker_detail.h"

namespace fsdpskip {
using namespace tracker_detail;

fsdpskip_verdict Tracker::traced(fsdpskip_kernel kernel, const at::Tensor& tensor, fsdpskip_verdict verdict) {
  if (log_level_ < FSDPSKIP_LOG_TRACE) return verdict;
  if (c10::StorageImpl* storage = storage_of(tensor)) {
    static const char* const kVerdicts[] = {"run", "skip", "audit", "run", "zero lazily", "zeros"};  // fsdpskip_verdict's order
    static_assert(sizeof kVerdicts / sizeof kVerdicts[0] == FSDPSKIP_VERDICT_COUNT, "a name for every verdict");
    std::string what = std::string(kernel_name(kernel)) + " -> " + kVerdicts[verdict] + ":";
    log(FSDPSKIP_MESSAGE_TRACE, what.c_str(), storage);
  }
  return verdict;
}

fsdpskip_verdict Tracker::decide_init(fsdpskip_kernel kernel, const at::Tensor& self,
                                      const compat::GeneratorArgument* generator) {
  if (is_random(kernel)) {
    if (probing_random_kernels()) return FSDPSKIP_RUN;
    if (generator != nullptr && unreproduced_count_.load() != 0 && !loading()) warn_if_unreproduced(kernel, self, *generator);
    fsdpskip_verdict verdict =
        random_draws(kernel, self) ? decide_init_untraced(self, false) : FSDPSKIP_RUN;
    // A kernel that draws pays what its generator owes first; a skipped one
    // adds to it (skipped()).
    if (verdict != FSDPSKIP_SKIP && generator != nullptr && generators_.owing()) pay_before_drawing(self, *generator);
    return writes(self, traced(kernel, self, verdict));
  }
  return writes(self, traced(kernel, self, decide_init_untraced(self, kernel == FSDPSKIP_ZERO)));
}

void Tracker::pay_before_drawing(const at::Tensor& self, const compat::GeneratorArgument& argument) {
  if (!self.device().is_cpu()) return;
  try {
    generators_.settle(cpu_generator(argument).unsafeGetGeneratorImpl(), false);
  } catch (const std::exception&) {
    // another device's generator: the kernel raises torch's own error
  }
}

void Tracker::warn_if_unreproduced(fsdpskip_kernel kernel, const at::Tensor& self,
                                   const compat::GeneratorArgument& argument) {
  if (!self.device().is_cpu()) return;
  std::optional<at::Generator> generator;
  try {
    generator = cpu_generator(argument);
  } catch (const std::exception&) {
    return;  // another device's generator: the kernel raises torch's own error
  }
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = unreproduced_.begin(); it != unreproduced_.end();) {
    c10::intrusive_ptr<c10::GeneratorImpl> held = it->generator.lock();
    if (held && held.get() != generator->unsafeGetGeneratorImpl()) {
      ++it;
      continue;
    }
    // This generator, or one that ended: either way its entry goes.
    bool ours = static_cast<bool>(held);
    bool reseeded = ours && (generator->current_seed() != it->seed || freshly_seeded(*generator));
    it = unreproduced_.erase(it);
    unreproduced_count_.fetch_sub(1);
    if (!ours) continue;
    if (reseeded || say_ == nullptr) return;
    std::string line = std::string(kernel_name(kernel)) +
                       " draws from a generator that may not be where it would be without fsdpskip: trunc_normal_'s "
                       "rejection sampling (torch 2.12 and later) redraws the values outside its bounds, and the "
                       "values it tested were skipped (with bounds beyond about 6 standard deviations nothing is "
                       "redrawn, and then it is exact); reseed it after rank 0's values arrive (torch.manual_seed) "
                       "to draw as without fsdpskip";
    say_(FSDPSKIP_MESSAGE_WARNING, line.c_str());
    return;
  }
}

fsdpskip_verdict Tracker::decide_fill(const at::Tensor& self, const c10::Scalar& value) {
  bool zeroes = value.isBoolean()   ? !value.toBool()
                : value.isIntegral(false) ? value.toLong() == 0
                : value.isFloatingPoint() ? value.toDouble() == 0.0 && !std::signbit(value.toDouble())
                                          : false;  // complex and symbolic: an ordinary fill
  return writes(self, traced(FSDPSKIP_FILL, self, decide_init_untraced(self, zeroes)));
}

bool Tracker::lazy_zero_fits(const at::Tensor& self, c10::StorageImpl* storage, bool loading_now) const {
  char* begin;
  size_t bytes;
  if (audit_.load() || !contiguous_range(self, &begin, &bytes) || bytes < lazy_zero_threshold() ||
      !from_cpu_allocator(storage, compat::data_ptr(*storage).get_deleter()))
    return false;
  // transformers 5 makes a zeros_like placeholder of every parameter and
  // buffer on non-zero ranks (attention projections are often a few hundred
  // KiB). Outside loading (a later model's placeholders, which may land on
  // memory an earlier model freed and is still in memory) only a tensor
  // torch never wrote in place: its version counter, shared by its views,
  // is still 0, as a fresh zeros_like's is. Released, its pages lose nothing
  // in use. One atomic read, no lock or system call; training's zero_ never
  // gets here (decide_init_untraced), so a gradient's stays a memset.
  return loading_now || (!self.is_inference() && self.unsafeGetTensorImpl()->version_counter().current_version() == 0);
}

fsdpskip_verdict Tracker::decide_init_untraced(const at::Tensor& self, bool zeroes) {
  c10::StorageImpl* storage = storage_of(self);
  if (storage == nullptr || !enabled() || running_own_kernels()) return FSDPSKIP_RUN;
  bool loading_now = loading();
  if (loading_now || pending_.load() != 0) {
    if (tracked_.load() != 0) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (Record* record = find_locked(storage))
        return record->role == Role::kParameter ? skip_verdict() : FSDPSKIP_RUN;
    }
    // FSDP's reset_parameters() after to_empty(), and nn.init on a parameter
    // whose storage arrived without a new nn.Parameter.
    if (loading_now && self.requires_grad() && self.is_leaf() && tag(storage)) return skip_verdict();
  }
  return zeroes && !training() && lazy_zero_fits(self, storage, loading_now) ? FSDPSKIP_ZERO_LAZILY : FSDPSKIP_RUN;
}

fsdpskip_verdict Tracker::decide_copy(const at::Tensor& dst, const at::Tensor& src) {
  return writes(dst, decide_copy_untraced(dst, src));
}

fsdpskip_verdict Tracker::decide_copy_untraced(const at::Tensor& dst, const at::Tensor& src) {
  bool loading_now = loading();
  size_t pending = pending_.load();
  if (!loading_now && pending == 0) return FSDPSKIP_RUN;  // training: nothing left to resolve
  // A conversion of a skipped storage (model.to(dtype), .half()) stays skipped.
  c10::StorageImpl* source = storage_of(src);
  // The destination is tagged first: a copy that is not run must leave a
  // skipped storage behind, never stale bytes.
  if (loading_now && pending != 0 && enabled() && source != nullptr && is_pending(source) && tag(storage_of(dst)))
    return traced(FSDPSKIP_COPY, dst, skip_verdict());
  // Rank 0's data arriving through a copy resolves its destination (copied()).
  return traced(FSDPSKIP_COPY, dst, tracked_.load() != 0 ? FSDPSKIP_RUN_NOTIFY : FSDPSKIP_RUN);
}

fsdpskip_verdict Tracker::decide_chain(const at::Tensor& self, const at::Tensor& out) {
  if (pending_.load() == 0 || !enabled()) return writes(out, FSDPSKIP_RUN);  // the hot path: no storage lookups
  c10::StorageImpl* storage = storage_of(out);
  if (storage == nullptr || storage != storage_of(self)) return writes(out, FSDPSKIP_RUN);
  return writes(out, traced(FSDPSKIP_CHAIN, out, is_pending(storage) ? skip_verdict() : FSDPSKIP_RUN));
}

fsdpskip_verdict Tracker::writes(const at::Tensor& written, fsdpskip_verdict verdict) {
  if (zeros_known_.load() == 0 || verdict == FSDPSKIP_SKIP || verdict == FSDPSKIP_ZERO_LAZILY ||
      verdict == FSDPSKIP_ZEROS)
    return verdict;
  if (c10::StorageImpl* storage = storage_of(written)) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (Record* record = find_locked(storage)) set_zeros_locked(*record, false);
  }
  return verdict;
}

}  // namespace fsdpskip
