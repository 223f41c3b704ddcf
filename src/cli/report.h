// `fsdpskip report`: a job's per-process reports gathered into one verdict.
#pragma once

#include <string>
#include <vector>

namespace fsdpskip::cli {

struct ReportOptions {
  std::vector<std::string> inputs;  // report files or directories holding them
  bool json = false;
};
int report(const ReportOptions& options);

}  // namespace fsdpskip::cli
