// Entered as each of plugin.cc's callbacks starts: in the tests' faults
// build it throws where FSDPSKIP_INJECT_FAULT names the callback
// (plugin_faults.cc), elsewhere it is nothing. Only plugin.cc and
// plugin_faults.cc see it, so that plugin_exit.cc's object is the same in
// both builds and is compiled once for them.
#pragma once

#include "plugin_detail.h"

namespace fsdpskip {

#ifdef FSDPSKIP_FAULT_INJECTION
struct FSDPSKIP_PLUGIN_INTERNAL FaultPoint {
  bool previous;
  explicit FaultPoint(const char* callback);
  ~FaultPoint();
};
#else
struct FaultPoint {
  explicit FaultPoint(const char*) {}
};
#endif

}  // namespace fsdpskip
