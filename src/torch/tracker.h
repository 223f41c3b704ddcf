// What fsdpskip knows about storages in an active process, and every
// decision made from it: the storages' life (storage_table.h), the loading
// phase, and what each kernel, copy and collective does to them. Only the
// plugin's C adapter (plugin.cc, collective_side.cc) and the unit tests call
// it.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/StorageImpl.h>
#include <c10/util/intrusive_ptr.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "../common/plugin_abi.h"
#include "../common/report_table.h"
#include "compat.h"
#include "generator_history.h"
#include "replay.h"
#include "skip_stack.h"
#include "storage_table.h"

namespace fsdpskip {

// What the report and the summary say (report.def's counters), and the calls
// per kernel.
struct Stats : Counters {
  uint64_t calls[FSDPSKIP_KERNEL_COUNT] = {};  // skipped (audit: would be)
  bool loading_ended = false;
};

class Tracker {
 public:
  static Tracker& instance();  // immortal: deleters run until the very end

  // Where debug and trace lines go: the preload's sink (fsdpskip_host.say).
  using Say = void (*)(fsdpskip_message kind, const char* text);

  // Once, when the plugin is loaded; `say` may be nullptr (silent).
  void start(Say say);
  // The CPython found for the Python frames ("CPython 3.11.2"), or why none.
  std::string python_found() const;
  // The preload's decision (again whenever it changes). enabled: new tags and
  // skips are allowed; disabled, storages already skipped still resolve.
  // opens_loading: a new loading phase begins, if the last one ended.
  // stacks: what a skipped storage's record names (FSDPSKIP_STACKS).
  void set_policy(bool enabled, bool audit, fsdpskip_log_level log_level, fsdpskip_stacks stacks,
                  bool opens_loading);

  // normal_ and uniform_ pass their generator argument: a call whose draws
  // random_draws.h cannot count runs, and one drawing from a generator whose
  // draws could not be reproduced after loading is warned about, once.
  fsdpskip_verdict decide_init(fsdpskip_kernel kernel, const at::Tensor& self,
                               const compat::GeneratorArgument* generator = nullptr);
  fsdpskip_verdict decide_fill(const at::Tensor& self, const c10::Scalar& value);
  fsdpskip_verdict decide_copy(const at::Tensor& dst, const at::Tensor& src);
  // A chain step (kernels.def's role STEP) writing out from self with
  // `arguments`' operands.
  fsdpskip_verdict decide_chain(fsdpskip_kernel kernel, const at::Tensor& self, const at::Tensor& out,
                                const fsdpskip_call_arguments& arguments);
  // After a SKIP: counts the call, records the storage as pending (once)
  // with the call and its `arguments`, for its replay, and guards its
  // pages; a skipped normal_ or uniform_ (its generator argument passed)
  // moves its generator by the draws it would have made
  // (generator_history.h: owing their regenerations).
  // Returns false when the storage cannot be skipped after all (its record
  // went meanwhile): the caller runs the kernel on self.
  bool skipped(fsdpskip_kernel kernel, const at::Tensor& self, const compat::GeneratorArgument* generator,
               const fsdpskip_call_arguments* arguments);
  // A CPU generator's state is about to be read (reads) or replaced (a
  // reseed, a set state); its caller holds its lock. What it owes is paid
  // first, or dropped.
  void generator_touched(c10::GeneratorImpl* generator, bool reads);
  // Where the generators that owe are published (the preload's
  // owing_generators, plugin_abi.h), before any is, and who is told when
  // torch's draws must pass the forwarders (watch_draws); and where they are.
  void publish_owing_generators(void** slots, void (*watch_draws)(bool)) {
    generators_.publish_owing_to(slots, watch_draws);
  }
  void* const* owing_generators() { return generators_.owing_slots(); }
  // The regenerations `generator` owes (tests).
  uint64_t owed_regenerations(c10::GeneratorImpl* generator) { return generators_.owed(generator); }
  // After a ZERO_LAZILY: zeroes self exactly, releasing whole pages.
  void zero_lazily(const at::Tensor& self);
  void audited(fsdpskip_kernel kernel, const at::Tensor& self, uint64_t nanoseconds);
  void copied(const at::Tensor& dst, const at::Tensor& src);
  // A comparison with a scalar (other: c10::Scalar*), `|` (other: at::Tensor*)
  // or any() (other: nullptr) about to read self (and other): a skipped
  // storage among them is materialized first.
  void reading(fsdpskip_kernel kernel, const at::Tensor& self, const void* other);
  // Something fsdpskip does not follow is about to touch [address, address +
  // bytes): a fault on a guarded page (`fault`), or a system call that would
  // read or write the range (`access` names it). Every skipped storage it
  // overlaps is materialized first. Returns whether the address lies in
  // memory of OwnedPages' (for a fault: whether it may be retried).
  bool touched(const void* address, size_t bytes, bool fault, const char* access);
  // Gives a skipped storage its values (its recipe replayed) before
  // something fsdpskip does not skip reads or writes it; nothing when it is
  // not pending. Where that cannot be done, materialize_failed (set_stop)
  // stops the process.
  void materialize(const at::Tensor& tensor, const char* access);
  // Every storage still pending, materialized (training began, and no sync
  // covered them): their inits are paid now, as without fsdpskip.
  void materialize_pending(const char* access);
  // What stops the process when a skipped storage cannot be given its
  // values before an access (the plugin's: one line, the summary, exit 3).
  using MaterializeFailed = void (*)(const SkipSite& site, const std::string& why, const char* access);
  void set_stop(MaterializeFailed stop) { materialize_failed_ = stop; }
  void requires_grad_set(c10::TensorImpl* tensor);
  void data_set(const at::TensorBase& self);
  // A broadcast reaching a rank that is not its root, or a receive: the
  // skipped storages its tensors cover whole are resolved (the others
  // materialized), and the loading phase ends.
  void broadcast_started(const std::vector<at::Tensor>& tensors);
  // c10d::broadcast_coalesced reaching a rank that is not its root (DDP's
  // and FSDP1's sync): it writes every tensor it is given, after reading
  // them into its buckets.
  void coalesced_broadcast_started(const std::vector<at::Tensor>& tensors);
  // Tensors about to leave this rank (a broadcast at its root, a send, a
  // scatter's inputs): their skipped storages are first given their values
  // by replaying their skipped calls (in audit mode, where every init ran,
  // only counted), and the loading phase ends. Returns the skipped storages
  // that could not be replayed, with why: the caller stops the process
  // before they are sent.
  struct Unsendable {
    SkipSite site;
    std::string why;
  };
  std::vector<Unsendable> sending(const std::vector<at::Tensor>& tensors);
  // NCCL's C API sending [buffer, buffer + bytes): a skipped storage in it
  // cannot be replayed in order with NCCL's stream, so each is unsendable.
  std::vector<Unsendable> sending_raw(const void* buffer, size_t bytes);
  // A receive into raw memory (NCCL's C API): skipped storages lying wholly
  // inside [buffer, buffer + bytes) are resolved.
  void received(const void* buffer, size_t bytes);
  // One of training's collectives writing `bytes` (an all-reduce, a
  // reduce-scatter): the first one of at least kTrainingCollectiveBytes ends
  // the loading phase, and from then on a zero_ is never done lazily (a
  // gradient's zero stays a memset, without a system call). Answers whether
  // this call began training, and if so whether rank 0's data had arrived
  // before it; the caller then names what is still pending().
  struct TrainingStart {
    bool began = false;
    bool rank0_data_seen = false;
  };
  TrainingStart collective_started(size_t bytes);
  static constexpr size_t kTrainingCollectiveBytes = 1024;
  bool training() const { return training_.load(std::memory_order_relaxed); }

  // Tags `storage` as a parameter's placeholder, if the loading phase lasts
  // and it can be tracked (it has a deleter and a context of its own).
  bool tag(c10::StorageImpl* storage);
  bool is_tagged(const c10::StorageImpl* storage);
  bool is_pending(const c10::StorageImpl* storage);
  bool loading() const { return loading_.load(std::memory_order_relaxed); }
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }

  // From here on, frees no longer resolve anything (the process is exiting).
  void begin_shutdown() { shutting_down_.store(true); }
  Stats stats();
  std::vector<SkipSite> pending();
  // Placeholders tagged while loading (torch.empty, empty_like: their pages
  // not yet in memory) that nothing has written since: no init, copy, fill,
  // broadcast or receive fsdpskip saw, and still no page in memory, so no
  // write it could not see either. Found at the first call, as training
  // begins, and counted as storages_never_written; later calls (the report
  // at exit) get the same list.
  std::vector<SkipSite> never_written();

  // Called by tracked_deleter: forgets ctx and returns its original deleter.
  c10::DeleterFnPtr forget(void* context);
  // True in a fork()ed child: it inherits the tags, its parent reports.
  bool forked_child() const { return forked_child_; }

 private:
  // A record whose storage ended: resolved by its free (or kept as pending
  // when the process is exiting).
  void ended_locked(StorageRecord& record);
  void sweep_ended_locked() { storages_.sweep([this](StorageRecord& record) { ended_locked(record); }); }
  StorageRecord* track_locked(c10::StorageImpl* storage, StorageState state) {
    return storages_.track(storage, state, [this](StorageRecord& record) { ended_locked(record); });
  }
  // The live pending record of `storage`, or nullptr.
  StorageRecord* find_pending_locked(const c10::StorageImpl* storage) {
    StorageRecord* record = storages_.find(storage);
    return record && record->pending() ? record : nullptr;
  }
  // Another rank's data overwrites it (by_free: its storage ended): its
  // recipe goes, and it is never skipped again.
  void resolve_locked(StorageRecord& record, bool by_free);
  // Materializes the pending record of `context` (an OwnedPages mapping), one at a time.
  void materialize_context(void* context, const char* access);
  // Resolves or materializes the pending storage of each tensor a
  // collective is about to write with another rank's data: all its bytes
  // written resolve it, fewer materialize it first.
  void arriving(const std::vector<at::Tensor>& tensors);
  // No new parameter is a placeholder from here on: rank 0's data started to
  // arrive (`by_rank0_data`), or training did.
  void end_loading_locked(bool by_rank0_data);
  // `call` describes the skipped call (a copy_'s `copy_source` given); for
  // normal_ and uniform_, `generator` is advanced by `draws` (and `call`
  // learns where it stood).
  // False when it cannot be skipped after all: the kernel runs.
  bool skip_storage(fsdpskip_kernel kernel, const at::Tensor& self, SkippedCall call, const char* unreplayable,
                    const at::Tensor* copy_source, const std::optional<at::Generator>& generator, uint64_t draws);
  // A skipped copy's source: what its storage skipped so far and where the
  // source lies in it; or why it cannot be replayed.
  const char* describe_copy_source_locked(const at::Tensor& src, SkippedCall& call);
  // A skipped storage given its values (and about to be sent): tagged again.
  void materialized_locked(StorageRecord& record);
  // Gives the pending records among `storages` their values (their calls
  // replayed) and marks them sent; the others are returned.
  std::vector<Unsendable> replay_pending(const std::vector<c10::StorageImpl*>& storages);
  // Before a normal_ or uniform_ on self runs: its generator pays what it owes.
  void pay_before_drawing(const at::Tensor& self, const compat::GeneratorArgument& generator);
  // Marks the first skip of a record; returns true when it was the first.
  bool mark_skipped_locked(StorageRecord& record, fsdpskip_kernel kernel, const at::Tensor& self);
  // After a first skip, outside the lock: where it came from, into its site.
  void record_skip_stack(c10::StorageImpl* storage);
  // After a tag by requires_grad_set or data_set: a storage of the CPU
  // allocator's with no page in memory is a placeholder, its site recorded.
  void note_placeholder(c10::StorageImpl* storage, const c10::TensorImpl& tensor);
  bool shutting_down() const;
  fsdpskip_verdict skip_verdict() const { return audit_ ? FSDPSKIP_AUDIT : FSDPSKIP_SKIP; }
  // True when a zero_ of self is done exactly by releasing pages: a large
  // range of the CPU allocator's during loading (placeholders), or after it,
  // until training begins, one that torch never wrote in place.
  bool lazy_zero_fits(const at::Tensor& self, c10::StorageImpl* storage, bool loading_now) const;
  // zeroes: the call writes all-zero bytes (zero_, fill_ with +0).
  fsdpskip_verdict decide_init_untraced(const at::Tensor& self, bool zeroes);
  // One line through say_ (FSDPSKIP_LOG=debug: tags and skips; trace: every decision).
  void log(fsdpskip_message kind, const char* what, const c10::StorageImpl* storage);
  fsdpskip_verdict traced(fsdpskip_kernel kernel, const at::Tensor& tensor, fsdpskip_verdict verdict);

  std::mutex mutex_;
  std::mutex materializing_;  // one materialization at a time; taken before mutex_
  MaterializeFailed materialize_failed_ = nullptr;
  StorageTable storages_;
  std::vector<SkipSite> freed_at_shutdown_;
  std::optional<std::vector<SkipSite>> never_written_;  // never_written()'s answer, once found
  // The storages zeroed lazily during this loading phase, by their data:
  // written (with zeros), though none of their pages is in memory.
  std::unordered_set<const void*> zeroed_while_loading_;
  GeneratorHistory generators_;  // where skipped calls' generators stood, and what they owe
  Stats stats_;
  std::atomic<bool> loading_{true};
  std::atomic<bool> training_{false};
  std::atomic<bool> tagged_any_{false};
  std::atomic<bool> shutting_down_{false};
  std::atomic<bool> enabled_{true};
  std::atomic<bool> audit_{false};
  bool forked_child_ = false;
  std::atomic<fsdpskip_log_level> log_level_{FSDPSKIP_LOG_SUMMARY};
  std::atomic<fsdpskip_stacks> stacks_{FSDPSKIP_STACKS_PYTHON};
  std::string python_found_;  // find_python's answer, for the debug log
  Say say_ = nullptr;
};

// "normal_", "copy_", "erfinv_", ... as the summary and the report name them.
const char* kernel_name(fsdpskip_kernel kernel);

// "4096x1024" for a tensor's sizes.
std::string shape_string(c10::IntArrayRef sizes);

}  // namespace fsdpskip
