// The CPython layouts of src/torch/python_layouts.h against the headers of
// the suite's Python (tests/fixtures/python_layout.c prints offsetof on them):
// Debian 12 checks 3.11's row, trixie 3.13's, sid 3.14's. The frames read
// with them are checked on real programs by
// tests/integration/test_python_frames.py.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <string>

#include "../../src/torch/python_layouts.h"

namespace fsdpskip {
namespace {

std::map<std::string, size_t> printed_by(const char* program) {
  std::map<std::string, size_t> values;
  FILE* output = popen(program, "r");
  if (output == nullptr) return values;
  char name[64];
  size_t value;
  while (fscanf(output, "%63s %zu", name, &value) == 2) values[name] = value;
  pclose(output);
  return values;
}

TEST(PythonLayout, TheRowOfTheSuitesPythonMatchesItsHeaders) {
  if (*FSDPSKIP_PYTHON_LAYOUT == '\0') GTEST_SKIP() << "the suite's Python has no internal headers here";
  std::map<std::string, size_t> header = printed_by(FSDPSKIP_PYTHON_LAYOUT);
  ASSERT_TRUE(header.count("minor")) << FSDPSKIP_PYTHON_LAYOUT << " printed nothing";
  int minor = static_cast<int>(header["minor"]);
  EXPECT_EQ(header["object_type"], kObjectType);
  EXPECT_EQ(header["first_hidden_owner"], static_cast<size_t>(kFirstHiddenFrameOwner));
  if (header.count("stackref_tag_bits")) EXPECT_EQ(header["stackref_tag_bits"] & ~kStackRefTagBits, 0u);

  if (minor <= 12) {
    const PythonLayout* row = nullptr;
    for (const PythonLayout& layout : kFixedPythonLayouts)
      if (layout.minor == minor) row = &layout;
    ASSERT_NE(row, nullptr) << "no row for 3." << minor;
    EXPECT_EQ(header["thread_frame"], row->thread_frame);
    EXPECT_EQ(header["cframe_frame"], static_cast<size_t>(row->cframe_frame));
    EXPECT_EQ(header["frame_previous"], row->frame_previous);
    EXPECT_EQ(header["frame_code"], row->frame_code);
    EXPECT_EQ(header["frame_instruction"], row->frame_instruction);
    EXPECT_EQ(header["frame_owner"], row->frame_owner);
    EXPECT_EQ(header["code_filename"], row->code_filename);
    EXPECT_EQ(header["code_name"], row->code_name);
    EXPECT_EQ(header["code_firstlineno"], row->code_firstlineno);
    EXPECT_EQ(header["code_bytecode"], row->code_bytecode);
    EXPECT_EQ(header["unicode_length"], row->unicode_length);
    EXPECT_EQ(header["unicode_state"], row->unicode_state);
    EXPECT_EQ(header["ascii_size"], row->ascii_size);
    EXPECT_EQ(header["compact_size"], row->compact_size);
    return;
  }
  const DebugOffsetsPositions* row = nullptr;
  for (const DebugOffsetsPositions& positions : kDebugOffsetsPositions)
    if (positions.minor == minor) row = &positions;
  ASSERT_NE(row, nullptr) << "no row for 3." << minor;
  EXPECT_EQ(header["version_position"], kDebugOffsetsVersion);
  EXPECT_EQ(header["free_threaded_position"], kDebugOffsetsFreeThreaded);
  EXPECT_EQ(header["compact_extra"], 16u);
  EXPECT_EQ(header["thread_current_frame"], row->thread_current_frame);
  EXPECT_EQ(header["frame_previous"], row->frame_previous);
  EXPECT_EQ(header["frame_executable"], row->frame_executable);
  EXPECT_EQ(header["frame_instruction"], row->frame_instruction);
  EXPECT_EQ(header["frame_owner"], row->frame_owner);
  EXPECT_EQ(header["code_filename"], row->code_filename);
  EXPECT_EQ(header["code_name"], row->code_name);
  EXPECT_EQ(header["code_firstlineno"], row->code_firstlineno);
  EXPECT_EQ(header["code_bytecode"], row->code_bytecode);
  EXPECT_EQ(header["unicode_state"], row->unicode_state);
  EXPECT_EQ(header["unicode_length"], row->unicode_length);
  EXPECT_EQ(header["unicode_ascii_size"], row->unicode_ascii_size);
}

}  // namespace
}  // namespace fsdpskip
