// What a unit test needs from the machine it runs on (root, for one): where
// the run declares it required (FSDPSKIP_REQUIRED, a space-separated list;
// tools/test declares root), lacking it fails the test; elsewhere the test is
// skipped, saying why. The integration tests' twin is harness.require.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>
#include <string>

namespace fsdpskip {

inline bool run_requires(const std::string& what) {
  const char* declared = std::getenv("FSDPSKIP_REQUIRED");
  std::istringstream words(declared ? declared : "");
  for (std::string word; words >> word;) {
    if (word == what) return true;
  }
  return false;
}

}  // namespace fsdpskip

#define FSDPSKIP_REQUIRE(what, met, reason)                                         \
  do {                                                                              \
    if (met) break;                                                                 \
    if (::fsdpskip::run_requires(what))                                             \
      FAIL() << reason << ": required here (FSDPSKIP_REQUIRED names " what ")";    \
    GTEST_SKIP() << reason;                                                         \
  } while (0)
