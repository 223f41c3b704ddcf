#include "skip_stack.h"

#ifdef FSDPSKIP_HAVE_LIBUNWIND
#include <libunwind.h>
#else
#include <execinfo.h>
#endif

namespace fsdpskip {

SkipStack capture_skip_stack(fsdpskip_stacks detail) {
  SkipStack stack;
  if (detail == FSDPSKIP_STACKS_OFF) return stack;
  if (detail == FSDPSKIP_STACKS_PYTHON) append_python_frames(&stack.python, kPythonFrames);
#ifdef FSDPSKIP_HAVE_LIBUNWIND
  stack.native_depth = unw_backtrace(stack.native, kNativeFrames);
#else
  stack.native_depth = backtrace(stack.native, kNativeFrames);
#endif
  if (stack.native_depth < 0) stack.native_depth = 0;
  return stack;
}

}  // namespace fsdpskip
