// The plugin's work at exit and its stops: the summary line, the pending
// and never-written lines and the report (finish), what training's first
// collective says and, with FSDPSKIP_ON_PENDING=abort, ends (training_began),
// and the stop before a skipped value would be sent (stop_unless_sendable).
#include <unistd.h>

#include <atomic>
#include <cstdio>

#include "plugin_detail.h"
#include "report.h"

namespace fsdpskip {

const fsdpskip_host* g_preload = nullptr;

namespace {

// Callbacks that failed inside (plugin.cc's `guarded`), for the summary and the report.
std::atomic<uint64_t> g_internal_errors{0};

}  // namespace

void internal_error(const char* callback, const char* what) noexcept {
  if (g_internal_errors.fetch_add(1, std::memory_order_relaxed) != 0 || g_preload == nullptr) return;
  char line[512];  // no allocation: the failure may have been one
  snprintf(line, sizeof line, "internal error in %s (%s): that call ran as without fsdpskip; any later ones are "
           "counted in the summary", callback, what);
  g_preload->say(FSDPSKIP_MESSAGE_ERROR, line);
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
    // No rank trains on values fsdpskip made: they are paid now, late.
    if (!audit) tracker.materialize_pending("training's first collective");
    return;
  }
  finish();
  _exit(kPendingExitStatus);  // no atexit handlers: finish() was the preload's
}

void materialize_failed(const SkipSite& site, const std::string& why, const char* access) {
  say(FSDPSKIP_MESSAGE_ERROR, unmaterializable_stop_line(access));
  say(FSDPSKIP_MESSAGE_ERROR, unsendable_line(site, why));
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

}  // namespace fsdpskip
