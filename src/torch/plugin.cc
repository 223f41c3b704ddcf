// libfsdpskip_torch.so: the C adapter between the preload's hook table and
// the Tracker, and the work done at exit.
#include <ATen/ops/empty.h>
#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>
#include <type_traits>

#include "../common/plugin_abi.h"
#include "report.h"
#include "tracker.h"

#ifndef FSDPSKIP_TORCH_IDENTITY
#error "FSDPSKIP_TORCH_IDENTITY must name the libtorch this plugin is built for"
#endif

// Read by the preload from the file, before it decides to dlopen us: the
// libtorch we are built for and the plugin ABI we speak.
__attribute__((section(FSDPSKIP_TORCH_ID_SECTION), used)) static const char kTorchIdentity[] =
    "abi=" FSDPSKIP_PLUGIN_ABI_TEXT "\n" FSDPSKIP_TORCH_IDENTITY;  // abi first: a long libtorch path cannot cut it off

namespace fsdpskip {
namespace {

const fsdpskip_host* g_preload = nullptr;

// Callbacks that failed inside (plugin.cc's `guarded`), for the summary and the report.
std::atomic<uint64_t> g_internal_errors{0};

void internal_error(const char* callback, const char* what) noexcept {
  if (g_internal_errors.fetch_add(1, std::memory_order_relaxed) != 0 || g_preload == nullptr) return;
  char line[512];  // no allocation: the failure may have been one
  snprintf(line, sizeof line, "internal error in %s (%s): that call ran as without fsdpskip; any later ones are "
           "counted in the summary", callback, what);
  g_preload->say(FSDPSKIP_MESSAGE_ERROR, line);
}

#ifdef FSDPSKIP_FAULT_INJECTION
// A test build only (tests/CMakeLists.txt: libfsdpskip_torch_faults.so):
// FSDPSKIP_INJECT_FAULT=<callback>[,<callback>...] makes those callbacks
// throw std::bad_alloc as they start; <callback>:allocation, at its first
// allocation by the plugin's own code (its operator new below is the
// plugin's alone, bound inside it: torch's allocations never come here).
thread_local bool t_armed = false;
struct FaultPoint {
  bool previous = t_armed;  // restored on the way out: nested callbacks
  explicit FaultPoint(const char* callback) {
    static const char* injected = getenv("FSDPSKIP_INJECT_FAULT");
    size_t length = strlen(callback);
    for (const char* item = injected; item != nullptr && *item != '\0';) {
      const char* end = strchrnul(item, ',');
      if (static_cast<size_t>(end - item) >= length && strncmp(item, callback, length) == 0) {
        if (item + length == end) throw std::bad_alloc();
        if (strncmp(item + length, ":allocation", end - item - length) == 0) t_armed = true;
      }
      item = *end ? end + 1 : end;
    }
  }
  ~FaultPoint() { t_armed = previous; }
};
#else
struct FaultPoint {
  explicit FaultPoint(const char*) {}
};
#endif

const at::Tensor& tensor(const void* pointer) { return *static_cast<const at::Tensor*>(pointer); }

// normal_'s and uniform_'s generator argument, passed by reference (it is not trivially copyable).
const compat::GeneratorArgument* generator_argument(const void* pointer) {
  return static_cast<const compat::GeneratorArgument*>(pointer);
}

void say(fsdpskip_message kind, const std::string& text) { g_preload->say(kind, text.c_str()); }

void finish() {
  Tracker& tracker = Tracker::instance();
  tracker.begin_shutdown();
  if (tracker.forked_child()) return;
  bool audit = g_preload->mode == FSDPSKIP_MODE_AUDIT;
  std::vector<SkipSite> never_written = tracker.training() ? tracker.never_written() : std::vector<SkipSite>{};
  Stats stats = tracker.stats();
  stats[Counter::internal_errors] = g_internal_errors.load(std::memory_order_relaxed);
  std::vector<SkipSite> pending = tracker.pending();
  char hostname[256] = "unknown";
  gethostname(hostname, sizeof hostname - 1);
  ReportContext context{g_preload, hostname, getpid()};
  uint64_t calls = 0;
  for (uint64_t kernel_calls : stats.calls) calls += kernel_calls;
  // A process that did nothing (a helper that made a parameter or two, a
  // rank turned active too late) says its summary only at debug level; a rank
  // that had nothing to save says that, and why, at the default level.
  bool acted = calls || stats[Counter::lazy_zero_calls] || stats[Counter::storages_skipped] || !pending.empty() ||
               !never_written.empty() || stats[Counter::internal_errors];
  say(acted ? FSDPSKIP_MESSAGE_SUMMARY : FSDPSKIP_MESSAGE_DEBUG, summary_line(context, stats, audit));
  if (had_nothing_to_save(calls, stats, stats.loading_ended))
    say(FSDPSKIP_MESSAGE_SUMMARY, nothing_skipped_line(context, stats));
  for (const SkipSite& site : pending) say(FSDPSKIP_MESSAGE_PENDING, pending_line(site));
  if (stats[Counter::storages_skipped] && !stats.loading_ended)
    say(FSDPSKIP_MESSAGE_ADVICE, "parameter inits were skipped but no broadcast from rank 0 was seen; make sure "
                                  "this rank receives rank 0's values (sync_module_states, DDP, dist.broadcast)");
  if (g_preload->report_template != nullptr) {
    std::string path, error;
    if (!expand_report_path(g_preload->report_template, context, &path, &error) ||
        !write_atomically(path, report_json(context, stats, pending, never_written, audit), &error))
      say(FSDPSKIP_MESSAGE_ERROR, "FSDPSKIP_REPORT: " + error + "; no report written");
  }
}

// Training's first collective: storages still pending now hold zeros where
// this rank should hold values, and training is about to use them. Named
// here, while the job can still be stopped, and again at exit; with
// FSDPSKIP_ON_PENDING=abort the process ends here, after its exit summary
// and report, so that a job stops before it trains on them. Audit mode ran
// every init: it only warns.
void training_began(size_t bytes, bool rank0_data_seen) {
  Tracker& tracker = Tracker::instance();
  if (tracker.forked_child()) return;  // its parent reports
  std::vector<SkipSite> pending = tracker.pending(), never_written = tracker.never_written();
  if (pending.empty() && never_written.empty()) return;
  bool audit = g_preload->mode == FSDPSKIP_MODE_AUDIT;
  bool aborting = !audit && g_preload->on_pending == FSDPSKIP_ON_PENDING_ABORT;
  if (!pending.empty())
    say(aborting ? FSDPSKIP_MESSAGE_ERROR : FSDPSKIP_MESSAGE_WARNING,
        pending_in_training_line(bytes, pending.size(), rank0_data_seen, audit, aborting));
  else if (aborting)
    say(FSDPSKIP_MESSAGE_ERROR, never_written_abort_line(never_written.size()));
  // Not fsdpskip's doing: the framework's placeholders, with or without it.
  for (const SkipSite& site : never_written)
    say(aborting ? FSDPSKIP_MESSAGE_ERROR : FSDPSKIP_MESSAGE_PENDING_IN_TRAINING, never_written_line(site));
  if (!aborting) {
    for (const SkipSite& site : pending) say(FSDPSKIP_MESSAGE_PENDING_IN_TRAINING, pending_line(site));
    return;
  }
  finish();
  _exit(kPendingExitStatus);  // no atexit handlers: finish() was the preload's
}

// A collective about to send skipped storages that could not be given
// their values (Tracker::sending): the process stops before the collective
// runs, after its summary and report, so that no skipped value leaves it.
void stop_unless_sendable(const std::vector<Tracker::Unsendable>& unsendable, const std::string& collective) {
  if (unsendable.empty()) return;
  say(FSDPSKIP_MESSAGE_ERROR, unsendable_stop_line(collective, unsendable.size()));
  for (const Tracker::Unsendable& storage : unsendable)
    say(FSDPSKIP_MESSAGE_ERROR, unsendable_line(storage.site, storage.why));
  finish();
  _exit(kPendingExitStatus);  // no atexit handlers: finish() was the preload's
}

// "gloo broadcast (root 1 of a group of 2, this rank 1)", for a backend
// (compat::CollectiveBackend) or a c10d::ProcessGroup alike.
template <typename Group>
std::string collective_text(const Group& group, const char* collective, int64_t root) {
  std::string text = group.getBackendName() + " " + collective + " (";
  if (root >= 0) text += "root " + std::to_string(root) + " of ";
  return text + "a group of " + std::to_string(group.getSize()) + ", this rank " + std::to_string(group.getRank()) +
         ")";
}

// Every callback runs inside `guarded`: nothing unwinds out of the plugin
// into the preload (which has no C++ runtime) or torch's frames between
// them. A failure (an allocation) is counted, said once, and answered with
// `failed`: the call then runs as without fsdpskip (plugin_abi.h). The
// tracker commits a storage's state only once nothing more can fail, so an
// answer of failure never leaves a storage skipped but unaccounted.
template <typename Body, typename Result = std::invoke_result_t<Body>>
Result guarded(const char* callback, Result failed, Body&& body) noexcept {
  try {
    FaultPoint fault(callback);
    return body();
  } catch (const std::exception& error) {
    internal_error(callback, error.what());
  } catch (...) {
    internal_error(callback, "an unknown exception");
  }
  return failed;
}

template <typename Body>
void guarded(const char* callback, Body&& body) noexcept {
  guarded(callback, true, [&] { return body(), true; });
}

const fsdpskip_plugin kPlugin = {
    FSDPSKIP_PLUGIN_ABI,
    [](fsdpskip_kernel kernel, void* self, const void* generator) noexcept {
      return guarded("decide_init", FSDPSKIP_RUN,
                     [&] { return Tracker::instance().decide_init(kernel, tensor(self), generator_argument(generator)); });
    },
    [](void* self, const void* scalar) noexcept {
      return guarded("decide_fill", FSDPSKIP_RUN, [&] {
        return Tracker::instance().decide_fill(tensor(self), *static_cast<const c10::Scalar*>(scalar));
      });
    },
    [](void* dst, const void* src) noexcept {
      return guarded("decide_copy", FSDPSKIP_RUN, [&] { return Tracker::instance().decide_copy(tensor(dst), tensor(src)); });
    },
    [](const void* self, const void* out) noexcept {
      return guarded("decide_chain", FSDPSKIP_RUN,
                     [&] { return Tracker::instance().decide_chain(tensor(self), tensor(out)); });
    },
    [](fsdpskip_kernel kernel, const void* self, const void* other, const void* out) noexcept {
      return guarded("decide_on_zeros", FSDPSKIP_RUN, [&] {
        return Tracker::instance().decide_on_zeros(kernel, tensor(self), other, tensor(out));
      });
    },
    [](fsdpskip_kernel kernel, const void* out) noexcept {
      return guarded("zeros_produced", false, [&] { return Tracker::instance().zeros_produced(kernel, tensor(out)), true; });
    },
    [](const void* self, int slot) noexcept -> void* {
      return guarded("stand_in_like", static_cast<void*>(nullptr), [&]() -> void* {
        thread_local at::Tensor stand_ins[2];
        stand_ins[slot] = at::empty({0}, tensor(self).options());
        return &stand_ins[slot];
      });
    },
    [](const void* generator) noexcept -> void* {
      return guarded("stand_in_generator", static_cast<void*>(nullptr), [&]() -> void* {
        thread_local compat::GeneratorArgument copy;
        copy = *generator_argument(generator);
        return &copy;
      });
    },
    [](fsdpskip_kernel kernel, void* self, const void* generator, const fsdpskip_call_arguments* arguments) noexcept {
      return guarded("skipped", false, [&] {
        return Tracker::instance().skipped(kernel, tensor(self), generator_argument(generator), arguments), true;
      });
    },
    [](void* self) noexcept {
      return guarded("zero_lazily", false, [&] { return Tracker::instance().zero_lazily(tensor(self)), true; });
    },
    [](fsdpskip_kernel kernel, void* self, uint64_t ns) noexcept {
      guarded("audited", [&] { Tracker::instance().audited(kernel, tensor(self), ns); });
    },
    [](void* dst, const void* src) noexcept {
      guarded("copied", [&] { Tracker::instance().copied(tensor(dst), tensor(src)); });
    },
    [](void* impl) noexcept {
      guarded("requires_grad_set",
              [&] { Tracker::instance().requires_grad_set(static_cast<c10::TensorImpl*>(impl)); });
    },
    [](void* self) noexcept {
      guarded("data_set", [&] { Tracker::instance().data_set(*static_cast<const at::TensorBase*>(self)); });
    },
    [](const void* group, void* tensors, const void* options) noexcept {
      guarded("broadcast_started", [&] {
        const auto& list = *static_cast<std::vector<at::Tensor>*>(tensors);
        const compat::CollectiveBackend& backend = compat::backend(group);
        int64_t root = static_cast<const c10d::BroadcastOptions*>(options)->rootRank;
        // A group of one sends to nobody: its broadcast counts as the sync
        // it stands for (the doctor's probe, one-rank jobs).
        if (root != backend.getRank() || backend.getSize() == 1) return Tracker::instance().broadcast_started(list);
        stop_unless_sendable(Tracker::instance().sending(list), collective_text(backend, "broadcast", root));
      });
    },
    [](const void* group, const void* tensors, size_t count, int root) noexcept {
      guarded("coalesced_broadcast_started", [&] {
        const c10d::ProcessGroup& process_group = **static_cast<const c10::intrusive_ptr<c10d::ProcessGroup>*>(group);
        // The broadcast of its buckets resolves them.
        if (root != process_group.getRank() || process_group.getSize() == 1) return;
        const auto* first = static_cast<const at::Tensor*>(tensors);
        std::vector<at::Tensor> list(first, first + count);
        stop_unless_sendable(Tracker::instance().sending(list),
                             collective_text(process_group, "coalesced broadcast", root));
      });
    },
    [](const void* group, const void* tensors, bool nested, const char* collective) noexcept {
      guarded("sending", [&] {
        std::vector<at::Tensor> list;
        if (nested)
          for (const auto& inner : *static_cast<const std::vector<std::vector<at::Tensor>>*>(tensors))
            list.insert(list.end(), inner.begin(), inner.end());
        else
          list = *static_cast<const std::vector<at::Tensor>*>(tensors);
        if (list.empty()) return;  // a scatter's inputs are the root's alone
        stop_unless_sendable(Tracker::instance().sending(list), collective_text(compat::backend(group), collective, -1));
      });
    },
    [](const void* buffer, size_t bytes) noexcept {
      guarded("received", [&] { Tracker::instance().received(buffer, bytes); });
    },
    [](const void* buffer, size_t bytes, const char* collective) noexcept {
      guarded("sent_raw", [&] {
        stop_unless_sendable(Tracker::instance().sending_raw(buffer, bytes), collective + std::string(" (NCCL's C API)"));
      });
    },
    [](const void* tensors, size_t bytes) noexcept {
      guarded("collective_started", [&] {
        if (tensors != nullptr)
          for (const at::Tensor& tensor : *static_cast<const std::vector<at::Tensor>*>(tensors))
            if (tensor.defined()) bytes += tensor.numel() * tensor.itemsize();
        Tracker::TrainingStart start = Tracker::instance().collective_started(bytes);
        if (start.began) training_began(bytes, start.rank0_data_seen);
      });
    },
    [](bool opens_loading) noexcept {
      guarded("policy_changed", [&] {
        Tracker::instance().set_policy(g_preload->active, g_preload->mode == FSDPSKIP_MODE_AUDIT,
                                       g_preload->log_level, g_preload->stacks, opens_loading);
      });
    },
    [] { guarded("finish", finish); },
};

}  // namespace
}  // namespace fsdpskip

#ifdef FSDPSKIP_FAULT_INJECTION
// The plugin's own allocations (see FaultPoint). The block comes from the
// operator new the rest of the process uses, which every operator delete
// pairs with (a string grown inside libstdc++ is freed by code inlined
// here, and the other way round): a sanitizer's in the global scope, else
// the next one after the plugin's own (libstdc++'s).
void* operator new(size_t size) {
  if (fsdpskip::t_armed) {
    fsdpskip::t_armed = false;
    throw std::bad_alloc();
  }
  using New = void* (*)(size_t);
  static const New process_new = [] {
    auto found = reinterpret_cast<New>(dlsym(RTLD_DEFAULT, "_Znwm"));
    return found != static_cast<New>(&::operator new) ? found : reinterpret_cast<New>(dlsym(RTLD_NEXT, "_Znwm"));
  }();
  return process_new(size);
}
#endif

extern "C" __attribute__((visibility("default"))) const fsdpskip_plugin* fsdpskip_plugin_load(
    const fsdpskip_host* host) {
  using namespace fsdpskip;
  // From ABI 4 on, `abi` and `say` come first in every version of the host;
  // an older preload has no sink to say it through.
  if (host->abi < 4) {
    static const char kOlder[] = "fsdpskip: warning: libfsdpskip.so is older than libfsdpskip_torch.so (plugin ABI); "
                                 "inactive\n";
    if (write(STDERR_FILENO, kOlder, sizeof kOlder - 1) < 0) return nullptr;
    return nullptr;
  }
  if (host->abi != FSDPSKIP_PLUGIN_ABI) {
    host->say(FSDPSKIP_MESSAGE_WARNING,
              "the preload and libfsdpskip_torch.so come from different builds (plugin ABI); inactive");
    return nullptr;
  }
  g_preload = host;
  Tracker::instance().start(host->say);
  Tracker::instance().set_policy(host->active, host->mode == FSDPSKIP_MODE_AUDIT, host->log_level, host->stacks,
                                 false);
  host->say(FSDPSKIP_MESSAGE_DEBUG, ("Python frames: " + Tracker::instance().python_found()).c_str());
  return &kPlugin;
}
