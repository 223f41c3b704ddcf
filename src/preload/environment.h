// The libc functions environment.cc interposes, so the unit tests can check
// the preload exports exactly these and the hook table's rows.
#pragma once

namespace fsdpskip {

inline constexpr const char* kEnvironmentFunctions[] = {"setenv", "unsetenv", "putenv", "clearenv"};

}  // namespace fsdpskip
