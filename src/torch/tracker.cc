// The tracker's core: the policy, tagging and resolution, the counters and
// what is pending at the end (tracker.h; the other jobs are in tracker_*.cc,
// the storages' records in storage_table.cc).
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
  storages_.set_cpu_deleter(sample.get_deleter());
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

void Tracker::log(fsdpskip_message kind, const char* what, const c10::StorageImpl* storage) {
  fsdpskip_log_level least = kind == FSDPSKIP_MESSAGE_TRACE ? FSDPSKIP_LOG_TRACE : FSDPSKIP_LOG_DEBUG;
  if (log_level_ < least || say_ == nullptr) return;
  char line[256];
  snprintf(line, sizeof line, "%s storage %p (%zu bytes)", what, static_cast<const void*>(storage), storage->nbytes());
  say_(kind, line);
}

void Tracker::ended_locked(StorageRecord& record) {
  if (!record.pending()) return;
  if (shutting_down()) freed_at_shutdown_.push_back(*record.site);
  else resolve_locked(record, true);
}

bool Tracker::tag(c10::StorageImpl* storage) {
  if (storage == nullptr || !loading() || !enabled()) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  StorageRecord* record = storages_.find(storage);
  bool fresh = record == nullptr;
  // A parameter made before the plugin was loaded (its first): given pages
  // of its own if nothing wrote it yet, so that it can be skipped too.
  c10::DataPtr adopted_from;
  if (fresh && storages_.from_cpu_allocator(storage, compat::data_ptr(*storage).get_deleter()))
    adopted_from = OwnedPages::instance().adopt(storage);
  if (fresh) record = track_locked(storage, StorageState::kTagged);
  if (record != nullptr && adopted_from) record->adopted_from = std::move(adopted_from);
  if (record == nullptr || !record->parameter()) return false;
  if (fresh) ++stats_[Counter::storages_tagged];
  if (!tagged_any_.exchange(true)) log(FSDPSKIP_MESSAGE_DEBUG, "first tag:", storage);
  return true;
}

bool Tracker::is_tagged(const c10::StorageImpl* storage) {
  std::lock_guard<std::mutex> lock(mutex_);
  StorageRecord* record = storages_.find(storage);
  return record && record->parameter();
}

bool Tracker::is_pending(const c10::StorageImpl* storage) {
  std::lock_guard<std::mutex> lock(mutex_);
  return find_pending_locked(storage) != nullptr;
}

void Tracker::resolve_locked(StorageRecord& record, bool by_free) {
  if (record.pending()) {
    ++stats_[by_free ? Counter::resolved_by_free : Counter::resolved_by_overwrite];
    // Its pages read as zeros until the overwrite writes them (a free
    // unmaps them: OwnedPages::release).
    if (!by_free && OwnedPages::owns(record.original_deleter)) OwnedPages::instance().unguard(record.context);
  }
  storages_.set_state(record, StorageState::kReceived);
  record.calls.clear();
  record.unreplayable = nullptr;
}

bool Tracker::mark_skipped_locked(StorageRecord& record, fsdpskip_kernel kernel, const at::Tensor& self) {
  if (record.pending()) return false;
  // The site is made (it allocates) before anything is committed.
  record.site = site_of(*self.unsafeGetTensorImpl(), *record.storage, kernel);
  storages_.set_state(record, StorageState::kPending);
  ++stats_[Counter::storages_skipped];
  stats_[Counter::bytes_skipped] += record.storage->nbytes();
  return true;
}

c10::DeleterFnPtr Tracker::forget(void* context) {
  std::lock_guard<std::mutex> lock(mutex_);
  StorageRecord* record = storages_.find_context(context);
  if (record == nullptr || record->watched) return nullptr;
  c10::DeleterFnPtr original = record->original_deleter;
  ended_locked(*record);
  storages_.erase(context);
  return original;
}

Stats Tracker::stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  sweep_ended_locked();
  Stats stats = stats_;
  stats[Counter::pending_count] = storages_.pending() + freed_at_shutdown_.size();
  return stats;
}

std::vector<SkipSite> Tracker::pending() {
  std::lock_guard<std::mutex> lock(mutex_);
  sweep_ended_locked();
  std::vector<SkipSite> result = freed_at_shutdown_;
  storages_.for_each([&](const StorageRecord& record) {
    if (record.pending()) result.push_back(*record.site);
  });
  in_order_made(result);
  return result;
}

void tracked_deleter(void* context) {
  c10::DeleterFnPtr original = Tracker::instance().forget(context);
  if (original != nullptr) original(context);
  // else: not ours after all; leaking is the only safe choice.
}

}  // namespace fsdpskip
