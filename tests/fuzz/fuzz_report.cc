// `fsdpskip report` (src/cli/report.cc) on a report file written by another
// process: truncated, huge, deeply nested or of the wrong types.
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "fuzz_file.h"
#include "report.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static bool quiet = freopen("/dev/null", "w", stdout) != nullptr;  // stderr stays: sanitizers report there
  (void)quiet;
  fsdpskip::fuzz::File file(data, size, ".json");
  fsdpskip::cli::ReportOptions options;
  options.inputs = {file.path()};
  fsdpskip::cli::report(options);
  options.json = true;
  fsdpskip::cli::report(options);
  return 0;
}
