// The `%` sequences of FSDPSKIP_REPORT's path template, one row each: what
// the plugin expands (src/torch/report_file.cc names them in its error),
// what `fsdpskip run --report` lists, and what options.def's meaning of
// FSDPSKIP_REPORT says (tests/unit/test_options.cc checks it against this).
// Header-only and freestanding.
#pragma once

namespace fsdpskip {

struct ReportSequence {
  char letter;          // after the `%`
  const char* meaning;  // what it becomes
};

inline constexpr ReportSequence kReportSequences[] = {
    {'r', "rank"},   {'l', "local rank"},   {'p', "pid"},
    {'h', "host"},   {'j', "SLURM_JOB_ID"}, {'%', "a percent sign"},
};

}  // namespace fsdpskip
