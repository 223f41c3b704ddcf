// The subcommands of `fsdpskip`; main.cc parses the arguments into these.
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

struct DoctorOptions {
  std::string python;    // a Python whose torch to check ("" when libtorch is given)
  std::string libtorch;  // a LibTorch directory
  bool json = false;
};
int doctor(const DoctorOptions& options);

struct ReportOptions {
  std::vector<std::string> inputs;  // report files or directories holding them
  bool json = false;
};
int report(const ReportOptions& options);

}  // namespace fsdpskip::cli
