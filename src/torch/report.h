// What an active process says at exit: one summary line, one line per
// pending storage, and the optional JSON report (schema in README.md).
#pragma once

#include <string>

#include "../common/plugin_abi.h"
#include "tracker.h"

namespace fsdpskip {

struct ReportContext {
  const fsdpskip_host* host;
  std::string hostname;
  int pid;
};

// The line at exit (without the sink's "fsdpskip: " prefix): the calls per
// kernel, then report.def's summary fragments.
std::string summary_line(const ReportContext& context, const Stats& stats, bool audit);
// One pending storage: what it is and where it was skipped.
std::string pending_line(const SkipSite& site);
std::string report_json(const ReportContext& context, const Stats& stats,
                        const std::vector<SkipSite>& pending, bool audit);

// Expands %r %l %p %h %j %% in a FSDPSKIP_REPORT template into the report's
// path; false, with the sequence named in `error`, for a `%` sequence it does
// not know (a typo is never written out as a literal path).
bool expand_report_path(const std::string& path_template, const ReportContext& context, std::string* path,
                        std::string* error);

// Writes `contents` to `path` atomically: a new temporary file beside it
// (O_EXCL|O_NOFOLLOW: never through a symlink fsdpskip did not create), then
// rename(2). On failure returns false and sets `error`.
bool write_atomically(const std::string& path, const std::string& contents, std::string* error);

}  // namespace fsdpskip
