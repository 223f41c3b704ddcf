// `fsdpskip run`: a command under the preload.
#pragma once

#include <string>
#include <vector>

namespace fsdpskip::cli {

struct RunOptions {
  std::string mode;             // "" leaves FSDPSKIP as the environment has it
  std::string report_template;  // "" leaves FSDPSKIP_REPORT as it is
  std::string log_level;        // "" leaves FSDPSKIP_LOG as it is
  std::vector<std::string> command;
};
// Execs the command under the preload; returns only on failure (126/127).
int run_command(const RunOptions& options);

// LD_PRELOAD with `library` first, the other entries kept in order, and any
// other libfsdpskip.so (this one or another install's) dropped.
std::string preload_list_with(const std::string& library, const char* existing);

}  // namespace fsdpskip::cli
