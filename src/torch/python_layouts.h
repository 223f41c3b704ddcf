// Where CPython keeps what python_frames.cc reads, one row per minor version
// (x86_64 and aarch64: LP64, release builds). tests/unit/test_python_frames.cc
// compares the row of the Python whose headers it is built with against
// offsetof on those headers.
#pragma once

#include <stddef.h>
#include <stdint.h>

namespace fsdpskip {

// What the frame walk needs, as byte offsets into CPython's structures.
struct PythonLayout {
  int minor;
  size_t thread_frame;   // PyThreadState: current_frame (3.13+) or cframe (3.11, 3.12)
  long cframe_frame;     // _PyCFrame: current_frame; -1 where the thread state holds the frame itself
  size_t frame_previous, frame_code, frame_instruction, frame_owner;  // _PyInterpreterFrame
  size_t code_filename, code_name, code_firstlineno, code_bytecode;   // PyCodeObject
  size_t unicode_length, unicode_state, ascii_size, compact_size;     // PyASCIIObject, PyCompactUnicodeObject
};

// Every version: a frame whose owner is this or more is the C stack's or the
// interpreter's own entry (3.12, 3.13: FRAME_OWNED_BY_CSTACK; 3.14:
// FRAME_OWNED_BY_INTERPRETER), not the user's code.
constexpr int kFirstHiddenFrameOwner = 3;
// 3.14 keeps the code object in a _PyStackRef whose low bits are tags.
constexpr uintptr_t kStackRefTagBits = 3;
// PyObject's ob_type (no Py_TRACE_REFS build is supported), and
// PyVarObject's ob_size (a code object's length in 2-byte code units).
constexpr size_t kObjectType = 8;
constexpr size_t kObjectSize = 16;

// 3.11 and 3.12 describe nothing of themselves: fixed offsets. No 3.12 is on
// this project's machine: its row was checked by python_layout.c on CPython
// 3.12.3's headers on the GPU machine (bench-results/python-frames/).
inline constexpr PythonLayout kFixedPythonLayouts[] = {
    // minor thread cframe previous code instr owner filename name firstlineno bytecode length state ascii compact
    {11, 56, 8, 48, 32, 56, 69, 112, 120, 72, 184, 16, 32, 48, 72},
    {12, 56, 0, 8, 0, 56, 70, 112, 120, 68, 192, 16, 32, 40, 56},
};

// 3.13 and later: where in _PyRuntime's _Py_DebugOffsets each offset above is
// (its layout is fixed within a minor version), checked by its cookie and
// version. PyCompactUnicodeObject is PyASCIIObject and 16 bytes more.
struct DebugOffsetsPositions {
  int minor;
  size_t thread_current_frame, frame_previous, frame_executable, frame_instruction, frame_owner;
  size_t code_filename, code_name, code_firstlineno, code_bytecode;
  size_t unicode_state, unicode_length, unicode_ascii_size;
  size_t object_type;  // pyobject.ob_type: must read kObjectType, a check of the positions
};
constexpr size_t kDebugOffsetsVersion = 8;        // uint64_t: PY_VERSION_HEX
constexpr size_t kDebugOffsetsFreeThreaded = 16;  // uint64_t
inline constexpr char kDebugOffsetsCookie[8] = {'x', 'd', 'e', 'b', 'u', 'g', 'p', 'y'};

inline constexpr DebugOffsetsPositions kDebugOffsetsPositions[] = {
    // minor thread previous executable instr owner filename name firstlineno bytecode state length ascii ob_type
    {13, 184, 232, 240, 248, 264, 280, 288, 312, 344, 544, 552, 560, 360},
    {14, 208, 256, 264, 272, 288, 320, 328, 352, 384, 624, 632, 640, 408},
};

}  // namespace fsdpskip
