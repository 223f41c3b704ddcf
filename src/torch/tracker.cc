// The tracker's storage table: the records of tagged storages, their
// lookup, tagging and resolution, the policy, the counters and what is
// pending at the end (tracker.h; the other jobs are in tracker_*.cc).
#include "tracker_detail.h"

namespace fsdpskip {
using namespace tracker_detail;

const char* kernel_name(fsdpskip_kernel kernel) {
  static const char* const kNames[] = {
#define KERNEL(id, name, role) name,
#include "../common/kernels.def"
#undef KERNEL
  };
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
  OwnedPages::instance().install();
}

void Tracker::start(Say say) {
  say_ = say;
  // fork() (DataLoader workers) must not copy the lock held by a thread that
  // will not exist in the child. The locks are taken in the order they are
  // everywhere: a materialization's, the tracker's, the generators', then
  // OwnedPages' (which tag() takes for an adoption).
  pthread_atfork(
      [] {
        instance().materializing_.lock();
        instance().mutex_.lock();
        instance().generators_.mutex().lock();
        OwnedPages::instance().mutex().lock();
      },
      [] {
        OwnedPages::instance().mutex().unlock();
        instance().generators_.mutex().unlock();
        instance().mutex_.unlock();
        instance().materializing_.unlock();
      },
      [] {
        OwnedPages::instance().mutex().unlock();
        instance().generators_.mutex().unlock();
        instance().mutex_.unlock();
        instance().materializing_.unlock();
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
  // The loading phase lasts from the start: large storages get pages of their own.
  if (loading()) OwnedPages::instance().install();
}

std::string Tracker::python_found() const { return python_found_; }

bool Tracker::shutting_down() const {
  return shutting_down_.load() || python_finalizing();
}

bool Tracker::from_cpu_allocator(c10::StorageImpl* storage, c10::DeleterFnPtr deleter) const {
  return storage->device_type() == c10::DeviceType::CPU &&
         (deleter == cpu_deleter_ || deleter == &c10::free_cpu || OwnedPages::owns(deleter));
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
  record = Record{context, storage, swap ? deleter : nullptr, std::nullopt, role, false, false, nullptr, {}, {}, nullptr};
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
  // A parameter made before the plugin was loaded (its first): given pages
  // of its own if nothing wrote it yet, so that it can be skipped too.
  c10::DataPtr adopted_from;
  if (fresh && from_cpu_allocator(storage, compat::data_ptr(*storage).get_deleter()))
    adopted_from = OwnedPages::instance().adopt(storage);
  if (fresh) record = track_locked(storage, Role::kParameter);
  if (record != nullptr && adopted_from) record->adopted_from = std::move(adopted_from);
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
    // Its pages read as zeros until the overwrite writes them (a free
    // unmaps them: OwnedPages::release).
    if (!by_free && OwnedPages::owns(record.original_deleter)) OwnedPages::instance().unguard(record.context);
  }
  record.role = Role::kReceived;
  record.skipped = false;
  record.calls.clear();
  record.unreplayable = nullptr;
}

bool Tracker::owned_locked(const Record& record, c10::StorageImpl* storage) const {
  return !record.watched && OwnedPages::owns(record.original_deleter) && storage->device_type() == c10::DeviceType::CPU;
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
  in_order_made(result);
  return result;
}

void tracked_deleter(void* context) {
  c10::DeleterFnPtr original = Tracker::instance().forget(context);
  if (original != nullptr) original(context);
  // else: not ours after all; leaking is the only safe choice.
}

}  // namespace fsdpskip
