// The JSON report's file: its path from the FSDPSKIP_REPORT template, and
// its atomic writing. Torch-free, so tools/fuzz fuzzes the template alone.
#pragma once

#include <string>

#include "../common/plugin_abi.h"

namespace fsdpskip {

// What a report is written for.
struct ReportContext {
  const fsdpskip_host* host;
  std::string hostname;
  int pid;
};

// Expands the `%` sequences of a FSDPSKIP_REPORT template
// (src/common/report_template.h) into the report's path; false, with the
// sequence named in `error`, for a `%` sequence it does not know (a typo is
// never written out as a literal path).
bool expand_report_path(const std::string& path_template, const ReportContext& context, std::string* path,
                        std::string* error);

// Writes `contents` to `path` atomically: the directories above it that do
// not exist yet (mkdir -p, umask honoured), a new temporary file beside it
// (O_EXCL|O_NOFOLLOW: never through a symlink fsdpskip did not create), then
// rename(2). On failure returns false and sets `error`, naming the
// directory or file it could not create.
bool write_atomically(const std::string& path, const std::string& contents, std::string* error);

}  // namespace fsdpskip
