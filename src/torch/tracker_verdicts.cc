// Verdicts: whether an init, fill or copy of a tagged storage runs, is
// skipped, audited or zeroed lazily, as the trace log tells it.
#include "python_frames.h"
#include "tracker_detail.h"

namespace fsdpskip {
using namespace tracker_detail;

fsdpskip_verdict Tracker::traced(fsdpskip_kernel kernel, const at::Tensor& tensor, fsdpskip_verdict verdict) {
  if (log_level_ < FSDPSKIP_LOG_TRACE) return verdict;
  if (c10::StorageImpl* storage = storage_of(tensor)) {
    static const char* const kVerdicts[] = {"run", "skip", "audit", "run", "zero lazily"};  // fsdpskip_verdict's order
    static_assert(sizeof kVerdicts / sizeof kVerdicts[0] == FSDPSKIP_VERDICT_COUNT, "a name for every verdict");
    std::string what = std::string(kernel_name(kernel)) + " -> " + kVerdicts[verdict] + ":";
    log(FSDPSKIP_MESSAGE_TRACE, what.c_str(), storage);
  }
  return verdict;
}

namespace {

// From torch 2.12, trunc_normal_ is rejection sampling in Python: its
// normal_ (or, for narrow bounds, uniform_) is read at once by its test, so
// a skip would be materialized a moment later, at more than the draw's
// cost. A draw whose innermost Python frame is trunc_normal_'s own (in
// torch/nn/init.py) runs instead. Saving only: a draw it does not
// recognise (a LibTorch program, a copy of the function) is deferred and
// materialized, exactly all the same.
bool drawn_for_rejection_sampling() {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 12)
  std::vector<PythonFrame> innermost;
  append_python_frames(&innermost, 1);
  if (innermost.empty()) return false;
  const std::string& file = innermost[0].file;
  const std::string& function = innermost[0].function;
  static const std::string kInit = "torch/nn/init.py";
  return file.size() >= kInit.size() && file.compare(file.size() - kInit.size(), kInit.size(), kInit) == 0 &&
         function.find("trunc_normal") != std::string::npos;
#else
  return false;  // up to 2.11 it is uniform_ and chain steps, which join the recipe
#endif
}

}  // namespace

fsdpskip_verdict Tracker::decide_init(fsdpskip_kernel kernel, const at::Tensor& self,
                                      const compat::GeneratorArgument* generator) {
  if (is_random(kernel)) {
    if (probing_random_kernels()) return FSDPSKIP_RUN;
    fsdpskip_verdict verdict =
        random_draws(kernel, self) ? decide_init_untraced(self, false) : FSDPSKIP_RUN;
    if (verdict == FSDPSKIP_SKIP && drawn_for_rejection_sampling()) verdict = FSDPSKIP_RUN;
    // A kernel that draws pays what its generator owes first; a skipped one
    // adds to it (skipped()).
    if (verdict != FSDPSKIP_SKIP && generator != nullptr && generators_.owing()) pay_before_drawing(self, *generator);
    return traced(kernel, self, verdict);
  }
  return traced(kernel, self, decide_init_untraced(self, kernel == FSDPSKIP_ZERO));
}

void Tracker::pay_before_drawing(const at::Tensor& self, const compat::GeneratorArgument& argument) {
  if (!self.device().is_cpu()) return;
  try {
    generators_.settle(cpu_generator(argument).unsafeGetGeneratorImpl(), false);
  } catch (const std::exception&) {
    // another device's generator: the kernel raises torch's own error
  }
}

fsdpskip_verdict Tracker::decide_fill(const at::Tensor& self, const c10::Scalar& value) {
  bool zeroes = value.isBoolean()   ? !value.toBool()
                : value.isIntegral(false) ? value.toLong() == 0
                : value.isFloatingPoint() ? value.toDouble() == 0.0 && !std::signbit(value.toDouble())
                                          : false;  // complex and symbolic: an ordinary fill
  return traced(FSDPSKIP_FILL, self, decide_init_untraced(self, zeroes));
}

bool Tracker::lazy_zero_fits(const at::Tensor& self, c10::StorageImpl* storage, bool loading_now) const {
  char* begin;
  size_t bytes;
  if (audit_.load() || !contiguous_range(self, &begin, &bytes) || bytes < lazy_zero_threshold() ||
      !storages_.from_cpu_allocator(storage, compat::data_ptr(*storage).get_deleter()))
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
  if (storage == nullptr || running_own_kernels()) return FSDPSKIP_RUN;
  bool loading_now = loading() && enabled();
  if (loading_now || storages_.pending() != 0) {
    bool pending = false;
    if (storages_.tracked() != 0) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (StorageRecord* record = storages_.find(storage)) {
        // Only a parameter's storage with pages of its own is skipped, and only while loading.
        if (loading_now && record->parameter() && storages_.owned(*record)) return skip_verdict();
        pending = record->pending();
      }
    }
    // After loading nothing is skipped: a pending storage gets its values
    // first, and the kernel runs on them.
    if (pending) {
      materialize(self, "an init or fill that runs after loading");
      return FSDPSKIP_RUN;
    }
    // FSDP's reset_parameters() after to_empty(), and nn.init on a parameter
    // whose storage arrived without a new nn.Parameter.
    if (loading_now && self.requires_grad() && self.is_leaf() && tag(storage)) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (StorageRecord* record = storages_.find(storage); record && storages_.owned(*record)) return skip_verdict();
    }
  }
  return zeroes && enabled() && !training() && lazy_zero_fits(self, storage, loading_now) ? FSDPSKIP_ZERO_LAZILY
                                                                                        : FSDPSKIP_RUN;
}

fsdpskip_verdict Tracker::decide_copy(const at::Tensor& dst, const at::Tensor& src) {
  bool loading_now = loading() && enabled();
  if (storages_.pending() == 0 || running_own_kernels())
    return traced(FSDPSKIP_COPY, dst, storages_.tracked() != 0 && loading_now ? FSDPSKIP_RUN_NOTIFY : FSDPSKIP_RUN);
  c10::StorageImpl* source = storage_of(src);
  c10::StorageImpl* destination = storage_of(dst);
  bool source_pending = source != nullptr && is_pending(source);
  // A conversion of a skipped storage (model.to(dtype), .half()) stays
  // skipped, as "this conversion of that recipe", when the destination can
  // be guarded. It is tagged first: a copy that is not run must leave a
  // skipped storage behind, never stale bytes.
  if (loading_now && source_pending && destination != nullptr && destination != source && tag(destination)) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (StorageRecord* record = storages_.find(destination); record && storages_.owned(*record))
      return traced(FSDPSKIP_COPY, dst, skip_verdict());
  }
  // Otherwise the copy runs: it reads its source's values, and writes its
  // destination's. A destination written whole keeps nothing of its recipe;
  // one written in part gets its values first.
  if (source_pending) materialize(src, "copy_ (its source)");
  if (destination != nullptr && is_pending(destination)) {
    bool whole = covers_storage(dst, destination) && dst.sizes() == src.sizes() && destination != source;
    std::lock_guard<std::mutex> lock(mutex_);
    if (StorageRecord* record = storages_.find(destination); record && whole) resolve_locked(*record, false);
  }
  if (destination != nullptr && is_pending(destination)) materialize(dst, "copy_ (into a part of it)");
  return traced(FSDPSKIP_COPY, dst, storages_.tracked() != 0 ? FSDPSKIP_RUN_NOTIFY : FSDPSKIP_RUN);
}

fsdpskip_verdict Tracker::decide_chain(fsdpskip_kernel kernel, const at::Tensor& self, const at::Tensor& out,
                                       const fsdpskip_call_arguments& arguments) {
  // The hot path: no storage lookups. fsdpskip's own kernels (a replay, a
  // step's trial) run.
  if (storages_.pending() == 0 || running_own_kernels()) return FSDPSKIP_RUN;
  c10::StorageImpl* storage = storage_of(out);
  if (storage == nullptr) return FSDPSKIP_RUN;
  // In place on a skipped storage while loading, with scalar operands: the
  // step joins the recipe (trunc_normal_ up to torch 2.11).
  // (skipped() checks again that it is still skipped.)
  bool rewrites_skipped = false;
  if (loading() && enabled()) {
    std::lock_guard<std::mutex> lock(mutex_);
    StorageRecord* record = find_pending_locked(storage);
    rewrites_skipped = record && storages_.owned(*record);
  }
  if (rewrites_skipped && describe_step(kernel, out, arguments, nullptr) == nullptr)
    return traced(kernel, out, skip_verdict());
  // Otherwise it reads self and writes out: both get their values first.
  materialize(self, "a chain step (its input)");
  materialize(out, "a chain step (its output)");
  return traced(kernel, out, FSDPSKIP_RUN);
}

}  // namespace fsdpskip
