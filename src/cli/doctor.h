// `fsdpskip doctor`: can fsdpskip work with a torch installation, and what
// would it decide in this environment.
#pragma once

#include <string>

namespace fsdpskip::cli {

struct DoctorOptions {
  std::string python = "python3";  // a Python whose torch to check (unused when libtorch is given)
  std::string libtorch;  // a LibTorch directory
  bool json = false;
  std::string json_file;  // also write the JSON results here
};
int doctor(const DoctorOptions& options);

}  // namespace fsdpskip::cli
