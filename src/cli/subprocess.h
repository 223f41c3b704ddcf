// Runs a program with its output going to files, for the doctor's probes.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace fsdpskip::cli {

struct Finished {
  int status = -1;          // exit status; 128 + signal when killed; -1 when it could not start
  bool timed_out = false;
  std::string out, err;     // what it wrote
};

// Runs argv with the current environment changed by `set` (an empty value
// removes the variable); kills it after timeout_seconds.
Finished run_program(const std::vector<std::string>& argv, const std::map<std::string, std::string>& set,
                     const std::string& scratch_directory, int timeout_seconds);

std::string read_whole_file(const std::string& path);

}  // namespace fsdpskip::cli
