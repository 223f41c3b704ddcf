// Where a skip was called from: the Python frames (python_frames.h), then the
// native ones (libunwind, else glibc's backtrace). Captured once per skipped
// storage, outside fsdpskip's lock: unwinding walks the loaded objects
// (dl_iterate_phdr takes the dynamic linker's lock), and a thread holding that
// lock may be waiting for fsdpskip's.
#pragma once

#include <vector>

#include "../common/plugin_abi.h"
#include "python_frames.h"

namespace fsdpskip {

constexpr int kNativeFrames = 24;
constexpr int kPythonFrames = 12;

struct SkipStack {
  std::vector<PythonFrame> python;  // innermost first
  void* native[kNativeFrames] = {};
  int native_depth = 0;
};

// `detail` is FSDPSKIP_STACKS: what to capture.
SkipStack capture_skip_stack(fsdpskip_stacks detail);

}  // namespace fsdpskip
