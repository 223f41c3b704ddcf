// The Python frames (file, line, function) of the calling thread, read
// straight from CPython's structures without the GIL.
//
// torch's bindings release the GIL before calling into ATen, so a skip runs
// without it, often while fsdpskip's lock is held; taking the GIL there could
// deadlock against a thread that holds it and waits for a lock this thread
// holds (and hangs for good while the interpreter finalizes). Reading needs
// no lock: only the thread itself pushes and pops its frames, and each frame
// keeps its code object (and so the code's name strings) alive while it
// runs. Nothing is allocated, reference-counted or called in CPython but
// PyGILState_GetThisThreadState (a thread-local read) and PyCode_Addr2Line (a
// walk of the code's immutable line table).
//
// CPython is found at run time (no link-time dependency): its exported
// Py_Version picks the layout. 3.13 and later describe their own layout in
// _PyRuntime's debug offsets (meant for out-of-process profilers), of which
// only the positions of the fields used here are known per minor version;
// 3.11 and 3.12 have none, so their offsets are fixed here. All of them are
// checked against each version's headers by tests/unit/test_python_frames.cc
// (the rows for the headers at hand), and in the process itself: the first
// walk checks every read before it makes it (and each object's type), later
// walks read directly. Any other version, a free-threaded build, or a layout
// that fails its check gives no Python frames, never a guess.
#pragma once

#include <string>
#include <vector>

#include "../common/plugin_abi.h"

namespace fsdpskip {

struct PythonFrame {
  std::string file;      // co_filename, as CPython has it
  int line = 0;          // -1 when CPython could not tell
  std::string function;  // co_name
};

// Once, before any capture (Tracker::start): finds CPython in the process and
// its layout. Returns what was found, for FSDPSKIP_LOG=debug: "CPython 3.11.2"
// or why there are no Python frames ("no CPython in this process"). `say`
// (may be nullptr) gets one warning if the layout fails its check on the
// first frames read.
std::string find_python(void (*say)(fsdpskip_message kind, const char* text));

// True while the interpreter finalizes (module globals are being cleared):
// frees then are the process ending. False without CPython.
bool python_finalizing();

// Appends up to `most` frames of the calling thread, innermost first. Safe
// without the GIL and under any lock; adds nothing where find_python found no
// usable CPython, the thread has no Python state, or the interpreter is
// finalizing.
void append_python_frames(std::vector<PythonFrame>* frames, int most);

}  // namespace fsdpskip
