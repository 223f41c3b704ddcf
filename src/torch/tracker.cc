#include "tracker.h"

#include <c10/core/CPUAllocator.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/ge.h>
#include <ATen/ops/gt.h>
#include <ATen/ops/le.h>
#include <ATen/ops/lt.h>
#include <ATen/ops/zeros.h>
#include <c10/core/impl/alloc_cpu.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "compat.h"
#include "python_frames.h"
#include "random_draws.h"
#include "zero_pages.h"

namespace fsdpskip {
namespace {

// The generator this thread's last skipped normal_ or uniform_ was advanced
// on: an any() answered on zeros after it may have hidden redraws from it.
thread_local std::optional<c10::weak_intrusive_ptr<c10::GeneratorImpl>> t_last_advanced;

bool is_random(fsdpskip_kernel kernel) { return kernel == FSDPSKIP_NORMAL || kernel == FSDPSKIP_UNIFORM; }

// Zeroes a tensor with torch's own zero_ (on a device: the current stream).
// False when torch refused.
bool zero_tensor(const at::Tensor& tensor) {
  try {
    OwnKernels own;
    tensor.zero_();
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

// Zeroes a whole storage with torch's own kernels (on a device: the current
// stream), through a byte view of it. False when torch refused.
bool zero_with_torch(c10::StorageImpl* storage) {
  try {
    at::Tensor bytes = at::empty({0}, at::TensorOptions().dtype(at::kByte).device(storage->device()));
    bytes.set_(c10::Storage(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(storage)), 0,
               {static_cast<int64_t>(storage->nbytes())}, {1});
    return zero_tensor(bytes);
  } catch (const std::exception&) {
    return false;
  }
}

c10::StorageImpl* storage_of(const at::TensorBase& tensor) {
  return tensor.defined() ? compat::storage_of(tensor.unsafeGetTensorImpl()) : nullptr;
}

// The tensor's own bytes, when they are one contiguous range.
bool contiguous_range(const at::Tensor& tensor, char** begin, size_t* bytes) {
  if (!tensor.is_contiguous()) return false;
  c10::StorageImpl* storage = storage_of(tensor);
  if (storage == nullptr) return false;
  *begin = static_cast<char*>(compat::data_ptr(*storage).get()) + tensor.storage_offset() * tensor.itemsize();
  *bytes = tensor.numel() * tensor.itemsize();
  return true;
}

// True when `tensor` is the whole of `storage`, contiguous.
bool covers_storage(const at::Tensor& tensor, const c10::StorageImpl* storage) {
  return tensor.is_contiguous() && tensor.storage_offset() == 0 &&
         static_cast<size_t>(tensor.numel() * tensor.itemsize()) == storage->nbytes();
}

// What a skipped storage or a placeholder is, for its site (its stack comes later).
std::unique_ptr<SkipSite> site_of(const c10::TensorImpl& tensor, const c10::StorageImpl& storage,
                                  fsdpskip_kernel first_kernel) {
  auto site = std::make_unique<SkipSite>();
  site->shape = shape_string(tensor.sizes());
  site->dtype = std::string(c10::toString(c10::typeMetaToScalarType(tensor.dtype())));
  site->device = tensor.device().str();
  site->bytes = storage.nbytes();
  site->first_kernel = first_kernel;
  return site;
}

}  // namespace

const char* kernel_name(fsdpskip_kernel kernel) {
  // In fsdpskip_kernel's order (plugin_abi.h).
  static const char* const kNames[] = {"normal_", "uniform_", "zero_", "fill_", "copy_",      "chain",
                                       "lt",      "le",       "gt",    "ge",    "bitwise_or", "any"};
  static_assert(sizeof kNames / sizeof kNames[0] == FSDPSKIP_KERNEL_COUNT, "a name for every kernel");
  return kernel >= 0 && kernel < FSDPSKIP_KERNEL_COUNT ? kNames[kernel] : "?";
}

std::string shape_string(c10::IntArrayRef sizes) {
  std::string text;
  for (size_t i = 0; i < sizes.size(); ++i) text += (i ? "x" : "") + std::to_string(sizes[i]);
  return text.empty() ? "scalar" : text;
}

Tracker& Tracker::instance() {
  static Tracker* tracker = new Tracker;  // never destroyed: see tracked_deleter
  return *tracker;
}

void Tracker::set_policy(bool enabled, bool audit, fsdpskip_log_level log_level, fsdpskip_stacks stacks,
                         bool opens_loading) {
  enabled_.store(enabled);
  audit_.store(audit);
  log_level_.store(log_level);
  stacks_.store(stacks);
  if (!enabled || !opens_loading) return;
  std::lock_guard<std::mutex> lock(mutex_);
  // A later model of the same process: its placeholders are tagged until the
  // next broadcast from rank 0. Storages of earlier phases keep their state.
  if (!loading_.exchange(true)) tagged_any_.store(false);
}

void Tracker::start(Say say) {
  say_ = say;
  // fork() (DataLoader workers) must not copy the lock held by a thread that
  // will not exist in the child.
  pthread_atfork([] { instance().mutex_.lock(); }, [] { instance().mutex_.unlock(); },
                 [] {
                   instance().mutex_.unlock();
                   instance().forked_child_ = true;
                 });
  // The CPU allocator hands out posix_memalign memory: private anonymous
  // pages. Its deleter identifies that memory later.
  c10::DataPtr sample = c10::GetDefaultCPUAllocator()->allocate(1);
  cpu_deleter_ = sample.get_deleter();
  // The CPython of the Python frames and of python_finalizing(): frees while
  // the interpreter finalizes (module globals cleared) are the process
  // ending, not a resolution.
  python_found_ = find_python(say);
}

std::string Tracker::python_found() const { return python_found_; }

bool Tracker::shutting_down() const {
  return shutting_down_.load() || python_finalizing();
}

bool Tracker::from_cpu_allocator(c10::StorageImpl* storage, c10::DeleterFnPtr deleter) const {
  return storage->device_type() == c10::DeviceType::CPU &&
         (deleter == cpu_deleter_ || deleter == &c10::free_cpu);
}

void Tracker::log(fsdpskip_message kind, const char* what, const c10::StorageImpl* storage) {
  fsdpskip_log_level least = kind == FSDPSKIP_MESSAGE_TRACE ? FSDPSKIP_LOG_TRACE : FSDPSKIP_LOG_DEBUG;
  if (log_level_ < least || say_ == nullptr) return;
  char line[256];
  snprintf(line, sizeof line, "%s storage %p (%zu bytes)", what, static_cast<const void*>(storage), storage->nbytes());
  say_(kind, line);
}

Tracker::Record* Tracker::find_locked(const c10::StorageImpl* storage) {
  auto& data_ptr = compat::data_ptr(*const_cast<c10::StorageImpl*>(storage));
  auto found = records_.find(data_ptr.get_context());
  if (found == records_.end() || found->second.storage != storage) return nullptr;
  Record& record = found->second;
  if (record.watched) return record.watched->expired() ? nullptr : &record;
  return data_ptr.get_deleter() == &tracked_deleter ? &record : nullptr;
}

c10::DeleterFnPtr Tracker::original_deleter(const Record* record, c10::StorageImpl* storage) const {
  return record && !record->watched ? record->original_deleter : compat::data_ptr(*storage).get_deleter();
}

void Tracker::forget_locked(std::unordered_map<void*, Record>::iterator found) {
  Record& record = found->second;
  if (record.role == Role::kParameter && record.skipped) {
    if (shutting_down()) freed_at_shutdown_.push_back(*record.site);
    else resolve_locked(record, true);
  }
  set_zeros_locked(record, false);
  records_.erase(found);
  tracked_.fetch_sub(1);
}

void Tracker::sweep_ended_locked() {
  for (auto it = records_.begin(); it != records_.end();) {
    auto next = std::next(it);
    if (it->second.watched && it->second.watched->expired()) forget_locked(it);
    it = next;
  }
}

Tracker::Record* Tracker::track_locked(c10::StorageImpl* storage, Role role) {
  c10::DataPtr& data_ptr = compat::data_ptr(*storage);
  void* context = data_ptr.get_context();
  c10::DeleterFnPtr deleter = data_ptr.get_deleter();
  // Without a deleter and a context of its own, a storage's end cannot be
  // observed, so it is never tagged (and never skipped).
  if (context == nullptr || deleter == nullptr || deleter == &tracked_deleter) return nullptr;
  auto existing = records_.find(context);
  if (existing != records_.end()) {
    if (!existing->second.watched || !existing->second.watched->expired()) return nullptr;
    forget_locked(existing);  // a watched storage ended; a stranger has its address
  }
  bool swap = from_cpu_allocator(storage, deleter);
  // What may fail (the allocations) comes before the deleter is swapped: a
  // failure leaves the storage as it was.
  auto entry = records_.try_emplace(context).first;
  Record& record = entry->second;
  record = Record{storage, swap ? deleter : nullptr, std::nullopt, role, false, false, false, nullptr, {}, nullptr};
  if (!swap) {
    record.watched.emplace(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(storage));
  } else if (!data_ptr.compare_exchange_deleter(deleter, &tracked_deleter)) {
    records_.erase(entry);
    return nullptr;
  }
  tracked_.fetch_add(1);
  return &record;
}

bool Tracker::tag(c10::StorageImpl* storage) {
  if (storage == nullptr || !loading() || !enabled()) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  Record* record = find_locked(storage);
  bool fresh = record == nullptr;
  if (fresh) record = track_locked(storage, Role::kParameter);
  if (record != nullptr && record->role == Role::kDerived) {  // a mask's storage, reused for a parameter
    record->role = Role::kParameter;
    set_zeros_locked(*record, false);
    fresh = true;
  }
  if (record == nullptr || record->role != Role::kParameter) return false;
  if (fresh) ++stats_[Counter::storages_tagged];
  if (!tagged_any_.exchange(true)) log(FSDPSKIP_MESSAGE_DEBUG, "first tag:", storage);
  return true;
}

bool Tracker::is_tagged(const c10::StorageImpl* storage) {
  std::lock_guard<std::mutex> lock(mutex_);
  Record* record = find_locked(storage);
  return record && record->role == Role::kParameter;
}

bool Tracker::is_pending(const c10::StorageImpl* storage) {
  std::lock_guard<std::mutex> lock(mutex_);
  Record* record = find_locked(storage);
  return record && record->role == Role::kParameter && record->skipped;
}

void Tracker::resolve_locked(Record& record, bool by_free) {
  if (record.role == Role::kParameter && record.skipped) {
    ++stats_[by_free ? Counter::resolved_by_free : Counter::resolved_by_overwrite];
    pending_.fetch_sub(1);
  }
  record.role = Role::kReceived;
  record.skipped = false;
  record.calls.clear();
  record.unreplayable = nullptr;
  set_zeros_locked(record, false);
}

void Tracker::mark_unreplayable_locked(Record& record, const char* why) {
  if (record.role == Role::kParameter && record.skipped && record.unreplayable == nullptr) record.unreplayable = why;
}

bool Tracker::mark_skipped_locked(Record& record, fsdpskip_kernel kernel, const at::Tensor& self) {
  if (record.skipped) return false;
  // The site is made (it allocates) before anything is committed.
  record.site = site_of(*self.unsafeGetTensorImpl(), *record.storage, kernel);
  record.skipped = true;
  pending_.fetch_add(1);
  ++stats_[Counter::storages_skipped];
  stats_[Counter::bytes_skipped] += record.storage->nbytes();
  return true;
}

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
    if (!random_draws(kernel, self)) return writes(self, traced(kernel, self, FSDPSKIP_RUN));
  }
  return writes(self, traced(kernel, self, decide_init_untraced(self, kernel == FSDPSKIP_ZERO)));
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

void Tracker::skipped(fsdpskip_kernel kernel, const at::Tensor& self, const compat::GeneratorArgument* generator,
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
  const char* unreplayable = nullptr;
  SkippedCall call = describe_call(kernel, self, arguments, &unreplayable);
  const at::Tensor* copy_source =
      kernel == FSDPSKIP_COPY && arguments ? static_cast<const at::Tensor*>(arguments->value) : nullptr;
  skip_storage(kernel, self, std::move(call), unreplayable, copy_source, drawn_from, draws);
  if (drawn_from) t_last_advanced.emplace(drawn_from->getIntrusivePtr());
}

const char* Tracker::describe_copy_source_locked(const at::Tensor& src, SkippedCall& call) {
  c10::StorageImpl* source = storage_of(src);
  Record* record = source ? find_locked(source) : nullptr;
  if (record == nullptr || record->role != Role::kParameter || !record->skipped)
    return "a copy_ whose source was no longer a skipped storage is not replayed";
  if (record->unreplayable != nullptr) return record->unreplayable;
  call.source = std::make_shared<const CopySource>(CopySource{record->calls, source->nbytes(), geometry_of(src)});
  return nullptr;
}

void Tracker::skip_storage(fsdpskip_kernel kernel, const at::Tensor& self, SkippedCall call, const char* unreplayable,
                           const at::Tensor* copy_source, const std::optional<at::Generator>& generator,
                           uint64_t draws) {
  c10::StorageImpl* storage = storage_of(self);
  if (storage == nullptr) return;
  bool tagged = false, first = false;
  c10::DeleterFnPtr deleter = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Record* record = find_locked(storage);
    if (record != nullptr && record->role == Role::kParameter) {
      // What may fail comes before anything is committed: then the kernel runs on self.
      if (copy_source != nullptr && unreplayable == nullptr)
        unreplayable = describe_copy_source_locked(*copy_source, call);
      // A call that writes the whole storage makes every earlier one moot:
      // a storage re-initialised in a loop keeps one call.
      if (unreplayable == nullptr && covers_storage(self, record->storage)) record->calls.clear();
      if (unreplayable == nullptr && record->calls.size() == record->calls.capacity())
        record->calls.reserve(std::max<size_t>(2, 2 * record->calls.size()));
      if (generator) generators_.reserve();
      first = mark_skipped_locked(*record, kernel, self);
      if (generator) generators_.advance(*generator, draws, call);
      if (unreplayable == nullptr) record->calls.push_back(std::move(call));
      else mark_unreplayable_locked(*record, unreplayable);
      tagged = true;
      deleter = original_deleter(record, storage);
      ++stats_.calls[kernel];
    }
  }
  // Its record went between the verdict and now (the policy changed on
  // another thread): the kernel did not run, so at least no stale bytes.
  if (!tagged) {
    if (generator) advance(*generator, draws);
    zero_tensor(self);
    return;
  }
  // A skipped storage reads as zeros, never as stale contents (transformers
  // #45050's NaN). The CPU allocator's private anonymous pages are released;
  // device memory (the CUDA caching allocator's) is zeroed by torch's own
  // zero_ on the current stream; CPU memory of other kinds (file mappings,
  // shared or pinned memory) is left as it is.
  size_t bytes = storage->nbytes();
  Zeroed zeroed;
  bool anonymous = from_cpu_allocator(storage, deleter), left = false;
  if (anonymous) zeroed = zero_range(compat::data_ptr(*storage).get(), bytes, true);
  else if (storage->device_type() != c10::DeviceType::CPU && zero_with_torch(storage)) zeroed.written = bytes;
  else left = true;
  if (first) record_skip_stack(storage);
  std::lock_guard<std::mutex> lock(mutex_);
  // Known zeros only where the comparisons' answers can use them: the CPU allocator's memory.
  if (Record* record = find_locked(storage); record && record->role == Role::kParameter)
    set_zeros_locked(*record, anonymous && loading());
  if (!first) return;
  stats_[Counter::bytes_never_committed] += zeroed.released;
  stats_[Counter::bytes_zeroed_by_writing] += zeroed.written;
  if (left) stats_[Counter::bytes_left_unzeroed] += bytes;
  log(FSDPSKIP_MESSAGE_DEBUG, "skipped init of", storage);
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
  if (tracked_.load() != 0)
    if (Record* record = find_locked(storage)) record->placeholder = false;
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
    if (Record* record = find_locked(storage); record && record->role == Role::kParameter)
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
    if (Record* record = find_locked(storage); record && record->site) record->site->stack = std::move(stack);
  } catch (const std::exception&) {
    // The skip is recorded already: its site goes without a stack.
  }
}

void Tracker::copied(const at::Tensor& dst, const at::Tensor& src) {
  if (tracked_.load() == 0) return;
  c10::StorageImpl* destination = storage_of(dst);
  c10::StorageImpl* source = storage_of(src);
  if (destination == nullptr || source == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  Record* target = find_locked(destination);
  if (target == nullptr || target->role != Role::kParameter) return;
  target->placeholder = false;  // written: a copy of anything
  Record* origin = find_locked(source);
  // Only rank 0's data resolves: a copy of a locally computed tensor (the
  // resampling of torch >= 2.12's trunc_normal_, orthogonal_'s QR factor) does not.
  if (origin != nullptr && origin->role == Role::kReceived && covers_storage(dst, destination))
    return resolve_locked(*target, false);
  // Values written over skipped ones, which a replay of the skipped calls
  // alone would lose.
  mark_unreplayable_locked(*target, "a copy_ into it after its init was skipped is not replayed");
}

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
    Record* record = find_locked(storage);
    if (record == nullptr || record->role != Role::kParameter || record->skipped || record->placeholder ||
        zeroed_while_loading_.count(data) != 0 || !from_cpu_allocator(storage, original_deleter(record, storage)))
      return;
    record->placeholder = true;
    record->site = std::move(site);
  }
  record_skip_stack(storage);
}

std::vector<SkipSite> Tracker::never_written() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (never_written_) return *never_written_;
  sweep_ended_locked();
  std::vector<SkipSite> result;
  for (auto& entry : records_) {
    const Record& record = entry.second;
    if (record.role == Role::kParameter && record.placeholder && !record.skipped &&
        !any_page_resident(compat::data_ptr(*record.storage).get(), record.storage->nbytes()))
      result.push_back(*record.site);
  }
  stats_[Counter::storages_never_written] = result.size();
  never_written_ = result;
  return result;
}

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

c10::DeleterFnPtr Tracker::forget(void* context) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = records_.find(context);
  if (found == records_.end() || found->second.watched) return nullptr;
  c10::DeleterFnPtr original = found->second.original_deleter;
  forget_locked(found);
  return original;
}

Stats Tracker::stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  sweep_ended_locked();
  Stats stats = stats_;
  stats[Counter::pending_count] = pending_.load();
  return stats;
}

std::vector<SkipSite> Tracker::pending() {
  std::lock_guard<std::mutex> lock(mutex_);
  sweep_ended_locked();
  std::vector<SkipSite> result = freed_at_shutdown_;
  for (auto& entry : records_)
    if (entry.second.role == Role::kParameter && entry.second.skipped) result.push_back(*entry.second.site);
  return result;
}

void tracked_deleter(void* context) {
  c10::DeleterFnPtr original = Tracker::instance().forget(context);
  if (original != nullptr) original(context);
  // else: not ours after all; leaking is the only safe choice.
}

}  // namespace fsdpskip
