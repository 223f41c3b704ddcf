// libfsdpskip_torch.so: the C adapter between the preload's hook table and
// the Tracker, and the work done at exit.
#include <ATen/ops/empty.h>
#include <unistd.h>

#include <string>

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

const at::Tensor& tensor(const void* pointer) { return *static_cast<const at::Tensor*>(pointer); }

void say(fsdpskip_message kind, const std::string& text) { g_preload->say(kind, text.c_str()); }

void finish() {
  Tracker& tracker = Tracker::instance();
  tracker.begin_shutdown();
  if (tracker.forked_child()) return;
  bool audit = g_preload->mode == FSDPSKIP_MODE_AUDIT;
  Stats stats = tracker.stats();
  std::vector<SkipSite> pending = tracker.pending();
  char hostname[256] = "unknown";
  gethostname(hostname, sizeof hostname - 1);
  ReportContext context{g_preload, hostname, getpid()};
  uint64_t calls = 0;
  for (uint64_t kernel_calls : stats.calls) calls += kernel_calls;
  // A process that skipped nothing (a helper that made a parameter or two, a
  // rank turned active too late) says so only at debug level.
  bool acted = calls || stats[Counter::lazy_zero_calls] || stats[Counter::storages_skipped] || !pending.empty();
  say(acted ? FSDPSKIP_MESSAGE_SUMMARY : FSDPSKIP_MESSAGE_DEBUG, summary_line(context, stats, audit));
  for (const SkipSite& site : pending) say(FSDPSKIP_MESSAGE_PENDING, pending_line(site));
  if (stats[Counter::storages_skipped] && !stats.loading_ended)
    say(FSDPSKIP_MESSAGE_ADVICE, "parameter inits were skipped but no broadcast from rank 0 was seen; make sure "
                                  "this rank receives rank 0's values (sync_module_states, DDP, dist.broadcast)");
  if (g_preload->report_template != nullptr) {
    std::string path, error;
    if (!expand_report_path(g_preload->report_template, context, &path, &error) ||
        !write_atomically(path, report_json(context, stats, pending, audit), &error))
      say(FSDPSKIP_MESSAGE_ERROR, "FSDPSKIP_REPORT: " + error + "; no report written");
  }
}

const fsdpskip_plugin kPlugin = {
    FSDPSKIP_PLUGIN_ABI,
    [](fsdpskip_kernel kernel, void* self) { return Tracker::instance().decide_init(kernel, tensor(self)); },
    [](void* self, const void* scalar) {
      return Tracker::instance().decide_fill(tensor(self), *static_cast<const c10::Scalar*>(scalar));
    },
    [](void* dst, const void* src) { return Tracker::instance().decide_copy(tensor(dst), tensor(src)); },
    [](const void* self, const void* out) { return Tracker::instance().decide_chain(tensor(self), tensor(out)); },
    [](fsdpskip_kernel kernel, const void* self, const void* other, const void* out) {
      return Tracker::instance().decide_on_zeros(kernel, tensor(self), other, tensor(out));
    },
    [](fsdpskip_kernel kernel, const void* out) { Tracker::instance().zeros_produced(kernel, tensor(out)); },
    [](const void* self, int slot) -> void* {
      thread_local at::Tensor stand_ins[2];
      stand_ins[slot] = at::empty({0}, tensor(self).options());
      return &stand_ins[slot];
    },
    [](fsdpskip_kernel kernel, void* self) { Tracker::instance().skipped(kernel, tensor(self)); },
    [](void* self) { Tracker::instance().zero_lazily(tensor(self)); },
    [](fsdpskip_kernel kernel, void* self, uint64_t ns) { Tracker::instance().audited(kernel, tensor(self), ns); },
    [](void* dst, const void* src) { Tracker::instance().copied(tensor(dst), tensor(src)); },
    [](void* impl) { Tracker::instance().requires_grad_set(static_cast<c10::TensorImpl*>(impl)); },
    [](void* self) { Tracker::instance().data_set(*static_cast<const at::TensorBase*>(self)); },
    [](void* tensors) { Tracker::instance().broadcast_started(*static_cast<std::vector<at::Tensor>*>(tensors)); },
    [](const void* buffer, size_t bytes) { Tracker::instance().received(buffer, bytes); },
    [](bool opens_loading) {
      Tracker::instance().set_policy(g_preload->active, g_preload->mode == FSDPSKIP_MODE_AUDIT, g_preload->log_level,
                                     g_preload->stacks, opens_loading);
    },
    finish,
};

}  // namespace
}  // namespace fsdpskip

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
