// What an active process says at exit: one summary line, one line per
// pending storage, and the optional JSON report (schema in docs/report.md).
#pragma once

#include <string>

#include "report_file.h"
#include "tracker.h"

namespace fsdpskip {

// The line at exit (without the sink's "fsdpskip: " prefix): the calls per
// kernel, then report.def's summary fragments.
std::string summary_line(const ReportContext& context, const Stats& stats, bool audit);
// What a rank that tagged parameters and skipped none says instead.
std::string nothing_skipped_line(const ReportContext& context, const Stats& stats);
// One pending storage: what it is and where it was skipped.
std::string pending_line(const SkipSite& site);
// FSDPSKIP_ON_PENDING=abort's exit status (options.def says it too).
inline constexpr int kPendingExitStatus = 3;
// What training's first collective (of `bytes`) says when `pending` storages
// are still pending (FSDPSKIP_ON_PENDING): before any of rank 0's data
// arrived, or after it (data no sync covers); `aborting` when the process
// ends here.
std::string pending_in_training_line(size_t bytes, size_t pending, bool rank0_data_seen, bool audit, bool aborting);
// What a rank says as it stops before `collective` would send `count`
// skipped storages it could not give their values; then each of them,
// why, and where it was skipped.
std::string unsendable_stop_line(const std::string& collective, size_t count);
std::string unsendable_line(const SkipSite& site, const std::string& why);
// What a rank says as it stops because a skipped storage that `access` is
// about to touch cannot be given the values it would have had without
// fsdpskip (why); then that storage, as unsendable_line says it.
std::string unmaterializable_stop_line(const std::string& access);
// One placeholder that nothing wrote before training began, and where it was made.
std::string never_written_line(const SkipSite& site);
// What FSDPSKIP_ON_PENDING=abort says when only such placeholders stop it.
std::string never_written_abort_line(size_t never_written);
std::string report_json(const ReportContext& context, const Stats& stats, const std::vector<SkipSite>& pending,
                        const std::vector<SkipSite>& never_written, bool audit);

}  // namespace fsdpskip
